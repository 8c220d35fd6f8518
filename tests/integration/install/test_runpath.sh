# The installed libraries, plugins and hvdrun carry a RUNPATH relative to
# their own folder ($ORIGIN...), no DT_RPATH and no build-tree path; the
# shared library and plugins export only their C entry points; the CMake
# package and pkg-config files are where the documentation says.
. "$(dirname "$0")/lib.sh"

install_tree
for f in "$LIBDIR/cmake/hvd/hvdConfig.cmake" "$LIBDIR/cmake/hvd/hvdConfigVersion.cmake" \
         "$LIBDIR/cmake/hvd/hvdTargets.cmake" "$LIBDIR/pkgconfig/hvd.pc" "$PREFIX/include/hvd.h" \
         "$LIBDIR/libhvd.a"; do
  [ -f "$f" ] || fail "not installed: $f"
done
files=("$BINDIR/hvdrun" "$(readlink -f "$LIBDIR/libhvd.so")")
plugins=()
for p in gloo mpi; do
  case ",${HVD_WITH_PLUGINS:-}," in
    *",$p,"*)
      [ -f "$LIBDIR/libhvd_transport_$p.so" ] || fail "the $p plugin was built but not installed in $LIBDIR"
      plugins+=("$LIBDIR/libhvd_transport_$p.so") ;;
  esac
done
for f in "${files[@]}" "${plugins[@]}"; do
  d=$(readelf -d "$f") || fail "readelf -d $f"
  if echo "$d" | grep -q '(RPATH)'; then fail "$f has DT_RPATH (want DT_RUNPATH)"; fi
  rp=$(runpath_of "$f")
  [ -n "$rp" ] || fail "$f has no RUNPATH"
  case "$rp" in
    \$ORIGIN*) ;;
    *) fail "$f: RUNPATH '$rp' does not start with \$ORIGIN" ;;
  esac
  needs_no_build_tree "$f"
  echo "ok: $(basename "$f") RUNPATH $rp"
done
[ "$(runpath_of "$BINDIR/hvdrun")" = "\$ORIGIN/$(realpath -m --relative-to="$BINDIR" "$LIBDIR")" ] \
  || fail "hvdrun's RUNPATH does not lead to $LIBDIR"

exports=$(nm -D --defined-only "$LIBDIR/libhvd.so" | awk '{ print $3 }' | grep -v '^hvd_' | grep -v '^$')
[ -z "$exports" ] || fail "libhvd.so exports more than hvd_*: $(echo $exports | cut -c1-300)"
for p in "${plugins[@]}"; do
  exports=$(nm -D --defined-only "$p" | awk '{ print $3 }' | grep -v '^hvd_transport_plugin$' | grep -v '^$')
  [ -z "$exports" ] || fail "$(basename "$p") exports more than its entry points: $(echo $exports | cut -c1-300)"
done
echo "ok: libhvd.so and the plugins export only their C entry points"
