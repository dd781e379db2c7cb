# gen_pki: a fresh PKI for the test cluster in $P (sourced by `up`; needs common.sh). Keys are throwaway test keys
# generated at every fresh start and never leave the scratch directory.
gen_pki() {
  mkdir -p "$P"; chmod 700 "$P"
  (
    cd "$P"
    ca() { # ca NAME CN
      openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -days 3650 -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    }
    leaf() { # leaf CA NAME SUBJECT EKU [SAN]
      openssl req -newkey rsa:2048 -nodes -keyout "$2.key" -out "$2.csr" -subj "$3" 2>/dev/null
      {
        echo "extendedKeyUsage=$4"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "basicConstraints=CA:FALSE"
        [ -n "${5:-}" ] && echo "subjectAltName=$5"
      } >"$2.ext"
      openssl x509 -req -in "$2.csr" -CA "$1.crt" -CAkey "$1.key" -CAcreateserial -out "$2.crt" -days 3650 \
        -extfile "$2.ext" 2>/dev/null
      rm -f "$2.csr" "$2.ext"
    }
    ca ca kubevirt-rs-test-ca
    ca front-proxy-ca kubevirt-rs-test-front-proxy-ca
    leaf ca apiserver "/CN=kube-apiserver" serverAuth \
      "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    leaf ca admin "/O=system:masters/CN=kubernetes-admin" clientAuth
    leaf ca kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
    leaf ca kube-scheduler "/CN=system:kube-scheduler" clientAuth
    leaf ca kube-proxy "/CN=system:kube-proxy" clientAuth
    leaf ca apiserver-kubelet-client "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client" clientAuth
    leaf ca node-agent "/O=system:masters/CN=kubevirt-rs-node-agent" clientAuth
    leaf front-proxy-ca front-proxy-client "/CN=front-proxy-client" clientAuth
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

# write_kubeconfig FILE CERT_NAME: a kubeconfig for user CERT_NAME (client cert from $P) against the apiserver.
write_kubeconfig() {
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kubevirt-rs-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $P/ca.crt
users:
- name: $2
  user:
    client-certificate: $P/$2.crt
    client-key: $P/$2.key
contexts:
- name: kubevirt-rs-test
  context: {cluster: kubevirt-rs-test, user: $2}
current-context: kubevirt-rs-test
KC
}
