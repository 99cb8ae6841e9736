# Sourced by test.sh and demo.sh: installs the shared libraries the Iggy
# server and runtime binaries need (libhwloc15, libudev1) when missing.
install_iggy_libs() {
  if ! ldconfig -p | grep -q 'libhwloc\.so\.15' || ! ldconfig -p | grep -q 'libudev\.so\.1'; then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libhwloc15 libudev1 >/dev/null
  fi
}
