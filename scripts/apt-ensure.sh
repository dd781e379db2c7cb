# apt_ensure PKG...: installs the Debian packages among PKG that are not installed yet (one `apt-get update` and
# one install; nothing when all are present). Sourced by scripts/install-deps.sh and tests/cluster/install-deps.sh.
apt_ensure() {
  local p missing=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}
