# Shared by scripts/image-cpu.sh and scripts/image-gpu.sh (sourced, not run).
# buildah with vfs storage: works on any filesystem without fuse-overlayfs; every layer
# is a full copy, hence one committed layer per build (bud's default --layers=false).
B=(buildah --storage-driver vfs)

# pull_or_standin IMAGE STANDIN PACKAGES [SETUP [PATH_HEAD]]: sets $base to IMAGE when it
# can be pulled, else to STANDIN, an image made once from Debian bookworm's own packages
# (debootstrap a minimal root with PACKAGES, run SETUP in it, put PATH_HEAD in front of
# its PATH, commit it; later runs reuse it), and sets $base_made to how the base came to
# be. Needs $work (a scratch directory).
pull_or_standin() {
  local image=$1 standin=$2 packages=$3 setup=${4:-} head=${5:-} rootfs ctr_base
  base_made=pulled
  base=$image
  if "${B[@]}" pull -q "docker.io/$image" >/dev/null 2>&1; then return; fi
  echo "image: cannot pull $image; building a stand-in from Debian bookworm" >&2
  base=$standin
  base_made="reused, made by an earlier run"
  if "${B[@]}" inspect --type image "$base" >/dev/null 2>&1; then return; fi
  rootfs=$work/rootfs
  debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" \
    http://deb.debian.org/debian >/dev/null
  ctr_base=$("${B[@]}" from scratch)
  "${B[@]}" copy "$ctr_base" "$rootfs" / >/dev/null
  if [[ -n "$setup" ]]; then
    "${B[@]}" run --isolation chroot "$ctr_base" -- /bin/sh -c "$setup" >/dev/null
  fi
  "${B[@]}" config --env PATH=${head:+$head:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/bash "$ctr_base"
  "${B[@]}" commit -q "$ctr_base" "$base" >/dev/null
  "${B[@]}" rm "$ctr_base" >/dev/null
  rm -rf "$rootfs"
  base_made=made
}
