# Pinned versions and cache locations for the test cluster (sourced by the scripts in tests/cluster/).
# Changing a version here makes the next `up` rebuild into a fresh cache directory.
# Kubernetes 1.33 matches k8s-openapi's `v1_33` feature; the preinstalled kubectl (1.32) is within the skew policy.
K8S_VERSION=${K8S_VERSION:-1.33.13}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
# kubelet and kube-proxy are built from the same module as the control plane.
K8S_COMMANDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"
KV_CACHE=${KV_CACHE:-$HOME/.cache/kubevirt-rs}
K8S_BIN_DIR=$KV_CACHE/k8s-bin/v$K8S_VERSION
ETCD_BIN_DIR=$KV_CACHE/etcd-bin/v$ETCD_VERSION
# Multus CNI's thin plugin (cmd/multus), built by build-multus.sh; the nodes' CNI config delegates to it.
MULTUS_VERSION=${MULTUS_VERSION:-4.2.3}
MULTUS_BIN_DIR=$KV_CACHE/multus-bin/v$MULTUS_VERSION
