# benches/kubevirt-counters.sh — sourced by benches/vm.sh and benches/vmi.sh (needs `KV_NS`, `die`, kubectl, jq,
# curl): our components' own API request counters.

# api_requests: "vm-controller node-agent podset" — kubevirt_rs_vm_controller_api_requests_total (:8080) and
# kubevirt_rs_node_agent_api_requests_total (:8185) summed over every pod of each component, and the pod set
# (uid:restarts) they were read from, so a caller can tell that a restart reset a counter.
api_requests() {
  local json sum_c=0 sum_a=0 ip v set
  json=$(kubectl get pods -n "$KV_NS" -l 'kubevirt.io in (virt-controller,virt-handler)' -o json)
  set=$(jq -r '[.items[] | .metadata.uid + ":" + ([.status.containerStatuses[]?.restartCount] | add | tostring)] | sort | join(",")' <<<"$json")
  for ip in $(jq -r '.items[] | select(.metadata.labels["kubevirt.io"] == "virt-controller") | .status.podIP' <<<"$json"); do
    v=$(curl -fsS -m 5 "http://$ip:8080/metrics" | awk '$1 == "kubevirt_rs_vm_controller_api_requests_total" { print $2 }')
    [ -n "$v" ] || die "no kubevirt_rs_vm_controller_api_requests_total at http://$ip:8080/metrics"
    sum_c=$((sum_c + v))
  done
  for ip in $(jq -r '.items[] | select(.metadata.labels["kubevirt.io"] == "virt-handler") | .status.podIP' <<<"$json"); do
    v=$(curl -fsS -m 5 "http://$ip:8185/metrics" | awk '$1 == "kubevirt_rs_node_agent_api_requests_total" { print $2 }')
    [ -n "$v" ] || die "no kubevirt_rs_node_agent_api_requests_total at http://$ip:8185/metrics"
    sum_a=$((sum_a + v))
  done
  echo "$sum_c $sum_a $set"
}
