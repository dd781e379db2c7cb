//! Decompression wrappers chosen by magic bytes. All decoders are synchronous `Read` adapters: the pipeline
//! runs on blocking threads (see `pipeline`), and these are the codecs async-compression itself wraps.
//!
//! Every decoder accepts concatenated members/streams/frames, as the reference command-line tools do.

use std::io::{self, BufRead, BufReader, Read};

use crate::detect::Compression;

pub mod gzip;
pub mod xz_index;

/// A boxed byte stream.
pub type BoxRead = Box<dyn Read + Send>;

/// Maximum number of nested compression wrappers (e.g. `.xz` inside `.gz`).
pub const MAX_NESTING: usize = 2;

/// Memory liblzma may use before it stops decoding xz blocks on two threads (it then decodes on one).
/// Keeps the importer's peak RSS bounded whatever the block size of the input.
const XZ_THREADING_MEMLIMIT: u64 = 40 << 20;

/// Wraps `inner` in the decoder for `compression`. With `restarts`, a gzip stream is decoded by
/// [`gzip::GzipDecoder`], which records where it can start again (for a checkpointed import).
pub fn wrap(compression: Compression, inner: BoxRead, restarts: Option<&gzip::Restarts>) -> io::Result<BoxRead> {
    let buffered = BufReader::with_capacity(256 << 10, inner);
    Ok(match compression {
        Compression::Gzip => match restarts {
            Some(r) => Box::new(gzip::GzipDecoder::new(buffered, r.clone())),
            None => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        },
        Compression::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(buffered)?;
            // zstd frames may declare windows up to 2 GiB; cap at 128 MiB (zstd's default max is 128 MiB too,
            // stated explicitly because the window is allocated up front).
            d.window_log_max(27)?;
            Box::new(d)
        }
        Compression::Bzip2 => Box::new(bzip2::bufread::MultiBzDecoder::new(buffered)),
        Compression::Xz => Box::new(XzMulti::new(buffered)?),
    })
}

/// Multi-threaded xz decoding that continues across concatenated streams and skips stream padding.
/// liblzma's multi-threaded decoder has no `CONCATENATED` flag in the Rust binding, so the concatenation
/// is handled here.
struct XzMulti {
    decoder: Option<liblzma::bufread::XzDecoder<BufReader<BoxRead>>>,
    finished: bool,
}

impl XzMulti {
    fn new(inner: BufReader<BoxRead>) -> io::Result<Self> {
        Ok(XzMulti { decoder: Some(liblzma::bufread::XzDecoder::new_stream(inner, mt_stream()?)), finished: false })
    }
}

/// liblzma's multi-threaded xz decoder, bounded in memory ([`XZ_THREADING_MEMLIMIT`]).
pub(crate) fn mt_stream() -> io::Result<liblzma::stream::Stream> {
    liblzma::stream::MtStreamBuilder::new()
        .threads(2)
        .memlimit_threading(XZ_THREADING_MEMLIMIT)
        .memlimit_stop(u64::MAX)
        .decoder()
        .map_err(io::Error::other)
}

impl Read for XzMulti {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.finished || buf.is_empty() {
                return Ok(0);
            }
            let Some(dec) = self.decoder.as_mut() else {
                return Ok(0);
            };
            let n = dec.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            // End of one xz stream: skip 4-byte-aligned zero padding, then either EOF or another stream.
            let Some(dec) = self.decoder.take() else {
                return Ok(0);
            };
            let mut inner = dec.into_inner();
            loop {
                let avail = inner.fill_buf()?;
                if avail.is_empty() {
                    self.finished = true;
                    return Ok(0);
                }
                let zeros = avail.iter().take_while(|&&b| b == 0).count();
                if zeros == 0 {
                    break;
                }
                inner.consume(zeros);
            }
            let head = inner.fill_buf()?;
            if Compression::detect(head) != Some(Compression::Xz) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "trailing garbage after the end of the xz stream",
                ));
            }
            self.decoder = Some(liblzma::bufread::XzDecoder::new_stream(inner, mt_stream()?));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Decodes with the default decoder and, for gzip, with the restartable one too.
    fn roundtrip(c: Compression, compressed: Vec<u8>, want: &[u8]) {
        let restarts = gzip::Restarts::default();
        for r in [None, Some(&restarts)].into_iter().take(if c == Compression::Gzip { 2 } else { 1 }) {
            let mut out = Vec::new();
            wrap(c, Box::new(io::Cursor::new(compressed.clone())), r)
                .and_then(|mut r| r.read_to_end(&mut out))
                .unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(out, want, "{c} (restartable: {})", r.is_some());
        }
    }

    fn data() -> Vec<u8> {
        (0..300_000u32).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn gzip_multi_member() -> io::Result<()> {
        let d = data();
        let mut all = Vec::new();
        for half in d.chunks(150_000) {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(half)?;
            all.extend(e.finish()?);
        }
        roundtrip(Compression::Gzip, all, &d);
        Ok(())
    }

    #[test]
    fn xz_concatenated_with_padding() -> io::Result<()> {
        let d = data();
        let mut all = Vec::new();
        for half in d.chunks(150_000) {
            let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
            e.write_all(half)?;
            all.extend(e.finish()?);
            all.extend([0u8; 8]);
        }
        roundtrip(Compression::Xz, all, &d);
        Ok(())
    }

    #[test]
    fn xz_trailing_garbage_is_an_error() -> io::Result<()> {
        let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(b"hello")?;
        let mut all = e.finish()?;
        all.extend(b"junk");
        let mut out = Vec::new();
        let err = wrap(Compression::Xz, Box::new(io::Cursor::new(all)), None)?.read_to_end(&mut out).err();
        assert!(err.is_some_and(|e| e.to_string().contains("trailing garbage")));
        Ok(())
    }

    #[test]
    fn zstd_and_bzip2() -> io::Result<()> {
        let d = data();
        roundtrip(Compression::Zstd, zstd::encode_all(&d[..], 3)?, &d);
        let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
        e.write_all(&d)?;
        roundtrip(Compression::Bzip2, e.finish()?, &d);
        Ok(())
    }

    #[test]
    fn corrupt_gzip_fails() {
        let restarts = gzip::Restarts::default();
        for r in [None, Some(&restarts)] {
            let bad = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff];
            let mut out = Vec::new();
            let got =
                wrap(Compression::Gzip, Box::new(io::Cursor::new(bad)), r).and_then(|mut r| r.read_to_end(&mut out));
            assert!(got.is_err(), "restartable: {}", r.is_some());
        }
    }
}
