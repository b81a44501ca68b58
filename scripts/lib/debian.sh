# Fetching Debian packages of another suite or architecture with apt's own
# tools, from the mirror this machine's apt configuration names; sourced by
# scripts/vmtest-kernel and scripts/runtimes. Nothing is installed: the
# packages are downloaded into a private apt state and unpacked.

# The Debian mirror URI from this machine's apt sources (deb822 .sources
# files first, then one-line sources.list), skipping the security archive.
mirror_uri() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($i !~ /security/) print $i; break } }' "$f"
    done
}

# apt_setup CACHE SUITE ARCH [SUITE...]: a private apt state for SUITE/ARCH
# under CACHE/apt (CACHE/apt/SUITE+SUITE-ARCH for more than one suite: apt
# then takes each package from the suite its pin priorities prefer, e.g.
# sid's over experimental's, experimental's where sid has none); sets
# apt_dir and apt_opts (for apt-get and apt-cache).
apt_setup() {
    local cache=$1 suite=$2 arch=$3 uri key s
    shift 3
    uri=$(mirror_uri | head -n1)
    if [ -z "$uri" ]; then
        echo "${0##*/}: no Debian mirror found in /etc/apt/sources.list{,.d}" >&2
        exit 1
    fi
    key=$suite
    for s in "$@"; do key+="+$s"; done
    apt_dir="$cache/apt/$key-$arch"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    for s in "$suite" "$@"; do
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $s main"
    done >"$apt_dir/sources.list"
    # An empty dpkg status: what this host has installed (a newer version
    # from its own security suite, say) must not become the candidate,
    # which apt could then download from no source of SUITE.
    [ -e "$apt_dir/status" ] || : >"$apt_dir/status"
    apt_opts=(
        -o "Dir::Etc::SourceList=$apt_dir/sources.list"
        -o "Dir::Etc::SourceParts=$apt_dir/none"
        -o "Dir::State::Lists=$apt_dir/lists"
        -o "Dir::State::status=$apt_dir/status"
        -o "Dir::Cache=$apt_dir/cache"
        -o "APT::Get::List-Cleanup=0"
        -o "APT::Sandbox::User=root"
        -o "APT::Architecture=$arch"
        -o "APT::Architectures=$arch"
    )
}

# Refreshes the package lists of the state apt_setup made.
apt_update() {
    apt-get "${apt_opts[@]}" -qq update >&2
}
