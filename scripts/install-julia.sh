#!/usr/bin/env bash
# Installs Julia 1.5.3 for the Julia SDK's tests (bindings/julia) into a
# private prefix, without root and without touching the system's packages.
#
# Julia is not packaged for Debian bookworm, but bullseye's julia 1.5.3 runs
# here. This script
#   1. derives a bullseye source from the machine's own apt sources (the Debian
#      entry whose suite is this release's codename: its URI and keyring, with
#      the suite changed to bullseye), so no mirror is ever written down;
#   2. runs `apt-get update` and `apt-get download` against a temporary apt
#      configuration (source list, lists and cache in a temporary folder);
#   3. `dpkg -x`es every package into the prefix;
#   4. points the links that bullseye's julia ships dangling in
#      <prefix>/usr/lib/x86_64-linux-gnu/julia/ (libcurl, libgmp, libmpfr,
#      libpcre2-8, libssh2) at this machine's own libraries;
#   5. writes <prefix>/bin/julia, a wrapper that sets LD_LIBRARY_PATH and execs
#      the real binary, and checks it (VERSION, a matrix product, an exception
#      thrown and caught in compiled code, BigInt, a regex);
#   6. puts `julia` on PATH: run as root, it links /usr/local/bin/julia to the
#      wrapper (never replacing a julia already there); otherwise it links
#      ~/.local/bin/julia when that folder is on PATH. When `julia` on PATH is
#      still not this Julia, it prints the line that puts it there:
#        export PATH="<prefix>/bin:$PATH"
#      It also prints the line that lets `using Hvd` work from any folder:
#        export JULIA_LOAD_PATH="<repository>/bindings/julia:"
#
# libunwind is the exception: it comes from bullseye too (libunwind8 1.3.2).
# With bookworm's libunwind 1.6.2, julia 1.5.3 dies with SIGSEGV (inside
# _ULx86_64_dwarf_search_unwind_table) whenever a compiled Julia function
# throws -- `f() = error("x"); try f() catch end` -- while println(VERSION)
# and a matrix product still work.
#
# Idempotent: when <prefix>/bin/julia already works, it only refreshes the
# wrapper and does step 6 (about 4 s). The last line of standard output is
# always the wrapper's path; messages and the `export` lines go to standard
# error.
#
# Usage: scripts/install-julia.sh [--force]
# Environment:
#   HVD_JULIA_PREFIX    the prefix (default: $HOME/.cache/hvd-julia)
#   HVD_JULIA_SUITE     the Debian suite to take Julia from (default: bullseye)
#   HVD_JULIA_LINK_DIR  the folder for the `julia` link (default: see step 6);
#                       "none": make no link
set -euo pipefail

prefix=${HVD_JULIA_PREFIX:-${HOME:-/tmp}/.cache/hvd-julia}
case "$prefix" in /*) ;; *) prefix=$PWD/$prefix ;; esac
suite=${HVD_JULIA_SUITE:-bullseye}
wrapper=$prefix/bin/julia
repo=$(cd "$(dirname "$0")/.." && pwd)
force=0
case "${1:-}" in
  --force) force=1 ;;
  "") ;;
  -h|--help) sed -n '2,43p' "$0"; exit 0 ;;
  *) echo "install-julia: unknown argument '$1'" >&2; exit 2 ;;
esac

packages=(julia julia-common libjulia1 libjulia-openblas64 libdsfmt-19937-1 libgit2-1.1
          libllvm9 libmbedcrypto3 libmbedtls12 libmbedx509-0 libopenlibm3 libutf8proc2
          libopenblas64-0 libopenblas64-0-pthread libhttp-parser2.9 libffi7
          libunwind8)

# Libraries julia opens through links that bullseye points at its own
# packages; this machine provides them. soname -> bookworm package (for the
# message when one is missing).
declare -A host_libs=(
  [libcurl.so.4]=libcurl4 [libgmp.so.10]=libgmp10 [libmpfr.so.6]=libmpfr6
  [libpcre2-8.so.0]=libpcre2-8-0 [libssh2.so.1]=libssh2-1)

log() { echo "install-julia: $*" >&2; }
die() { echo "install-julia: error: $*" >&2; exit 1; }

verify() {
  # VERSION; a matrix product through the bundled OpenBLAS; an exception
  # thrown from compiled code and caught (unwinding: see libunwind above);
  # the host's libgmp and libpcre2 through BigInt and a regex.
  "$wrapper" --startup-file=no -e '
    println(VERSION)
    A = [1.0 2.0; 3.0 4.0]; B = [5.0 6.0; 7.0 8.0]
    C = A * B
    C == [19.0 22.0; 43.0 50.0] || error("matrix product gave $C")
    M = reshape(collect(1.0:256.0), 16, 16)
    sum(M * M) == only(sum(M, dims=1) * sum(M, dims=2)) || error("16x16 product wrong")
    thrower() = throw(ArgumentError("expected"))
    caught = try thrower(); false catch e; e isa ArgumentError end
    caught || error("exception not caught")
    big(2)^100 == parse(BigInt, "1267650600228229401496703205376") || error("BigInt wrong")
    match(r"a+", "caab").match == "aa" || error("regex wrong")
    println("checks ok")' 2>&1
}

# The wrapper: sets LD_LIBRARY_PATH to the prefix's libraries and execs the
# real binary. It finds the prefix from its own real path, so a link to it
# (/usr/local/bin/julia) works.
write_wrapper() {  # write_wrapper FILE
  cat > "$1" <<'EOF'
#!/bin/sh
# Runs bullseye's julia from this private prefix (written by hvd's
# scripts/install-julia.sh). Works through links (/usr/local/bin/julia).
self=$(readlink -f "$0")
here=$(cd "$(dirname "$self")/.." && pwd)
lib=$here/usr/lib/x86_64-linux-gnu
LD_LIBRARY_PATH=$lib:$lib/julia:$lib/openblas64-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec "$here/usr/bin/julia" "$@"
EOF
  chmod 755 "$1"
}

# ---- 6. julia on PATH (defined here, run at the end) -----------------------
# The link folder: HVD_JULIA_LINK_DIR; else /usr/local/bin as root; else
# ~/.local/bin when it is on PATH; else none.
on_path() {  # on_path DIR: DIR is an entry of PATH
  case ":$PATH:" in *":$1:"*) return 0 ;; esac
  return 1
}
put_on_path() {
  local link_dir real link have
  if [ -n "${HVD_JULIA_LINK_DIR+x}" ]; then
    link_dir=${HVD_JULIA_LINK_DIR:-none}
  elif [ "$(id -u)" -eq 0 ]; then
    link_dir=/usr/local/bin
  elif [ -n "${HOME:-}" ] && on_path "$HOME/.local/bin"; then
    link_dir=$HOME/.local/bin
  else
    link_dir=none
  fi
  real=$(readlink -f "$wrapper")
  if [ "$link_dir" != none ]; then
    link=$link_dir/julia
    if [ -L "$link" ] && [ "$(readlink -f "$link")" = "$real" ]; then
      log "$link -> $wrapper (linked before)"
    elif [ -e "$link" ] || [ -L "$link" ]; then
      log "$link exists and is another julia: left alone"
    elif mkdir -p "$link_dir" 2>/dev/null && ln -s "$wrapper" "$link" 2>/dev/null; then
      log "linked $link -> $wrapper"
    else
      log "cannot create $link: no link made"
    fi
  fi
  hash -r
  have=$(command -v julia 2>/dev/null || true)
  if [ -n "$have" ] && [ "$(readlink -f "$have")" = "$real" ]; then
    log "'julia' on PATH is this Julia ($have)"
  else
    if [ -n "$have" ]; then
      log "'julia' on PATH is $have, not this Julia; to use this one, run (and add to ~/.bashrc):"
    else
      log "'julia' is not on PATH; to put it there, run (and add to ~/.bashrc):"
    fi
    printf 'export PATH="%s:$PATH"\n' "$(dirname "$wrapper")" >&2
  fi
  if [ -f "$repo/bindings/julia/Hvd/Project.toml" ]; then
    log "to load Hvd (using Hvd) from any folder, run (and add to ~/.bashrc):"
    printf 'export JULIA_LOAD_PATH="%s:"\n' "$repo/bindings/julia" >&2
  fi
}

if [ "$force" -eq 0 ] && [ -x "$wrapper" ]; then
  # A wrapper written by an older version of this script did not follow
  # links: refresh it.
  write_wrapper "$wrapper.new"
  if cmp -s "$wrapper.new" "$wrapper"; then rm -f "$wrapper.new"; else mv -f "$wrapper.new" "$wrapper"; fi
  if out=$(verify); then
    log "already installed ($(echo "$out" | head -1))"
    put_on_path
    echo "$wrapper"
    exit 0
  fi
fi

arch=$(dpkg --print-architecture)
[ "$arch" = amd64 ] || die "only amd64 is supported (this machine: $arch)"
multiarch=x86_64-linux-gnu
command -v apt-get >/dev/null || die "apt-get not found (a Debian machine is needed)"

# ---- 1. derive the bullseye source from this machine's apt sources --------
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$codename" ] || die "cannot read VERSION_CODENAME from /etc/os-release"

# Prints "URI<TAB>KEYRING" for the first enabled 'deb' entry whose suites
# include the bare codename (not -updates/-security), from deb822 .sources
# files and one-line .list files alike.
find_source() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v want="$codename" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled != "no" && uri != "") {
          n = split(suites, s, " ")
          for (i = 1; i <= n; i++) if (s[i] == want) { print uri "\t" key; found = 1; exit }
        }
        types = ""; suites = ""; uri = ""; key = ""; enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[A-Za-z-]+:/ {
        field = tolower($1); sub(/:$/, "", field)
        value = $0; sub(/^[^:]*:[ \t]*/, "", value)
        if (field == "types") types = value
        else if (field == "suites") suites = value
        else if (field == "uris") { split(value, u, " "); uri = u[1] }
        else if (field == "signed-by") key = value
        else if (field == "enabled") enabled = tolower(value)
      }
      END { if (!found) flush() }' "$f" | head -1
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v want="$codename" '
      $1 != "deb" { next }
      {
        key = ""; i = 2
        if ($2 ~ /^\[/) {
          opts = ""
          for (; i <= NF; i++) { opts = opts " " $i; if ($i ~ /\]$/) { i++; break } }
          if (match(opts, /signed-by=[^] ]+/)) key = substr(opts, RSTART + 10, RLENGTH - 10)
        }
        if ($(i + 1) == want) { print $i "\t" key; exit }
      }' "$f" | head -1
  done
}

src=$(find_source | head -1)
[ -n "$src" ] || die "no enabled 'deb' entry for suite '$codename' in /etc/apt/sources.list{,.d}"
mirror=${src%%$'\t'*}
keyring=${src#*$'\t'}
if [ -n "$keyring" ] && [ ! -f "$keyring" ]; then
  log "keyring '$keyring' is not a file; using the default trusted keys"
  keyring=""
fi
[ -n "$keyring" ] || { [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] &&
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg; } || true

# ---- 2. download the packages with a temporary apt configuration ----------
started=$(date +%s)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hvd-julia-apt.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
mkdir -p "$tmp/etc/sources.list.d" "$tmp/etc/preferences.d" "$tmp/lists/partial" \
         "$tmp/cache/archives/partial" "$tmp/debs"
if [ -n "$keyring" ]; then
  echo "deb [signed-by=$keyring] $mirror $suite main" > "$tmp/etc/sources.list"
else
  echo "deb $mirror $suite main" > "$tmp/etc/sources.list"
fi
apt_opts=(
  -o "Dir::Etc::sourcelist=$tmp/etc/sources.list"
  -o "Dir::Etc::sourceparts=$tmp/etc/sources.list.d"
  -o "Dir::Etc::preferences=$tmp/etc/preferences"
  -o "Dir::Etc::preferencesparts=$tmp/etc/preferences.d"
  -o "Dir::State::Lists=$tmp/lists"
  -o "Dir::Cache=$tmp/cache"
  -o "Dir::State::status=/dev/null"
  -o "APT::Architecture=$arch"
  -o "APT::Architectures=$arch"
  -o "APT::Sandbox::User=$(id -un)"
  -o "Debug::NoLocking=1"
  -o "Acquire::Languages=none"
)
log "apt source: $suite main from the machine's '$codename' mirror"
apt-get "${apt_opts[@]}" -qq update >"$tmp/update.log" 2>&1 ||
  { cat "$tmp/update.log" >&2; die "apt-get update against the $suite source failed"; }
(cd "$tmp/debs" && apt-get "${apt_opts[@]}" -qq download "${packages[@]}") >"$tmp/download.log" 2>&1 ||
  { cat "$tmp/download.log" >&2; die "apt-get download failed"; }
n=$(find "$tmp/debs" -name '*.deb' | wc -l)
[ "$n" -eq ${#packages[@]} ] || die "expected ${#packages[@]} packages, downloaded $n"

# ---- 3. unpack into the prefix --------------------------------------------
# Unpack into a staging folder next to the prefix, then swap it in, so an
# interrupted run never leaves a half-installed prefix that looks complete.
mkdir -p "$(dirname "$prefix")"
stage=$(mktemp -d "$prefix.stage.XXXXXX")
trap 'rm -rf "$tmp" "$stage"' EXIT
for deb in "$tmp"/debs/*.deb; do
  dpkg -x "$deb" "$stage"
done
[ -x "$stage/usr/bin/julia" ] || die "usr/bin/julia missing after unpacking"

# ---- 4. repoint dangling library links at this machine's libraries ---------
jlib=$stage/usr/lib/$multiarch/julia
missing=()
while IFS= read -r -d '' link; do
  name=$(basename "$link")
  target=$(readlink "$link")
  soname=$(basename "$target")
  # The link may name the unversioned .so (a -dev file); look for the
  # versioned runtime library with the same stem.
  found=""
  for cand in "/usr/lib/$multiarch/$soname" "/lib/$multiarch/$soname"; do
    [ -e "$cand" ] && { found=$cand; break; }
  done
  if [ -z "$found" ]; then
    stem=${soname%%.so*}
    for want in "${!host_libs[@]}"; do
      [ "${want%%.so*}" = "$stem" ] || continue
      for cand in "/usr/lib/$multiarch/$want" "/lib/$multiarch/$want"; do
        [ -e "$cand" ] && { found=$cand; break; }
      done
    done
  fi
  if [ -z "$found" ]; then
    stem=${soname%%.so*}
    pkg=""
    for want in "${!host_libs[@]}"; do [ "${want%%.so*}" = "$stem" ] && pkg=${host_libs[$want]}; done
    missing+=("$name -> $target${pkg:+ (install $pkg)}")
    continue
  fi
  ln -sfn "$found" "$link"
done < <(find "$jlib" -maxdepth 1 -xtype l -print0)
if [ ${#missing[@]} -gt 0 ]; then
  die "this machine lacks libraries julia needs: ${missing[*]}"
fi

# ---- 5. the wrapper ---------------------------------------------------------
mkdir -p "$stage/bin"
write_wrapper "$stage/bin/julia"

rm -rf "$prefix"
mv "$stage" "$prefix"
trap 'rm -rf "$tmp"' EXIT

if ! out=$(verify); then
  echo "$out" >&2
  die "the installed julia does not run"
fi
elapsed=$(( $(date +%s) - started ))
log "julia $(echo "$out" | head -1) installed in $prefix in ${elapsed} s"
put_on_path
echo "$wrapper"
