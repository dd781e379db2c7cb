//! Fuzzes the launcher's DHCP server ([`virt_launcher::dhcp::answer`]) with arbitrary messages from the guest.
//!
//! Invariants checked beyond "no panic": the answer is the same when asked twice, and every reply decodes as a
//! BOOTREPLY to the guest's MAC, on the client port, with the request's transaction ID, at least BOOTP's 300 bytes.
#![no_main]

use std::net::Ipv4Addr;

use dhcproto::v4::{Message, Opcode};
use dhcproto::Decodable;
use libfuzzer_sys::fuzz_target;
use virt_launcher::dhcp::{answer, Lease, CLIENT_PORT};

fuzz_target!(|data: &[u8]| {
    let lease = Lease {
        mac: [0x02, 0x6b, 0x76, 0x72, 0x73, 0x01],
        address: Ipv4Addr::new(10, 0, 2, 2),
        prefix: 24,
        server: Ipv4Addr::new(10, 0, 2, 1),
        router: Some(Ipv4Addr::new(10, 0, 2, 1)),
        routes: vec![("10.1.0.0/16".parse().expect("a network"), Ipv4Addr::new(10, 0, 2, 1))],
        dns: vec![Ipv4Addr::new(10, 96, 0, 10)],
        search: vec!["default.svc.cluster.local".into()],
        hostname: "testvmi".into(),
        mtu: 1450,
        lease_secs: 86400,
        boot_file: Some("pxelinux.0".into()),
        tftp_server: None,
        ntp: vec![],
    };
    let first = answer(&lease, data);
    assert_eq!(first, answer(&lease, data), "not deterministic");
    if let Ok(reply) = first {
        let request = Message::from_bytes(data).expect("answered, so it decoded");
        let m = Message::from_bytes(&reply.bytes).expect("our reply decodes");
        assert_eq!(m.opcode(), Opcode::BootReply);
        assert_eq!(m.chaddr(), &lease.mac[..]);
        assert_eq!(m.xid(), request.xid());
        assert_eq!(reply.to.port(), CLIENT_PORT);
        assert!(reply.bytes.len() >= 300);
    }
});
