#!/bin/busybox sh
# shellcheck shell=dash
#
# PID 1 of the openib SoftRoCE guest (see docs/SOFTROCE.md).
#
# Runs from the initramfs built by tests/softroce/guest: it loads the kernel
# modules listed in /modules/load.order, mounts the per-run job dir (9p tag
# "job") and the host root (9p tag "hostroot", read-only), prepares a chroot
# of the host root, creates the rxe0 SoftRoCE device, runs
# /run/openib-job/run.sh inside the chroot and powers off.
#
# Everything printed here goes to the kernel console (ttyS0), which the host
# side writes to <job>/console.log.  Results go to the job dir: stdout,
# stderr, rc, and harness-error if this script itself fails.
#
# /job/config (written by the host, validated there) sets:
#   NET=veth|socket   GUEST_IP=a.b.c.d/nn   GUEST_MAC=52:54:..  GUEST_HOSTNAME=name
#   RXE_DOWN=0|1      MODE=run|shell        ADD_HOSTS="ip=name ..."
#   HOSTROOT_CACHE=none|loose|mmap|fscache (9p cache mode of the host root)
#   GUEST_TIMEOUT=seconds (a last-resort limit for the command)

/bin/busybox mkdir -p /bin /proc /sys /dev /job /host
/bin/busybox --install -s /bin
export PATH=/bin
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null

JOB_MOUNTED=0

say() { echo "openib-guest: [$(cut -d' ' -f1 /proc/uptime)s] $*"; }

fail() {
    say "FATAL: $*"
    if [ "$JOB_MOUNTED" = 1 ]; then
        echo "$*" >>/job/harness-error
    fi
    sync
    poweroff -f
    sleep 30
}

# Run a program of the host root (iproute2's ip and rdma, ...) in the chroot.
hx() {
    chroot /host /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

# Wait up to $1 tenths of a second for the shell condition $2.
wait_for() {
    n=$1
    while ! eval "$2"; do
        n=$((n - 1))
        [ "$n" -gt 0 ] || return 1
        sleep 0.1
    done
    return 0
}

say "init started"

while read -r m; do
    [ -n "$m" ] || continue
    insmod "/modules/$m" || fail "insmod $m failed (see the kernel log above)"
done </modules/load.order
say "modules loaded"

P9OPTS=trans=virtio,version=9p2000.L,msize=262144
wait_for 50 "mount -t 9p -o $P9OPTS job /job 2>/dev/null" ||
    fail "cannot mount the 9p job share (mount_tag=job)"
JOB_MOUNTED=1
[ -r /job/config ] || fail "no /job/config in the job share"
# shellcheck disable=SC1091
. /job/config

wait_for 50 "mount -t 9p -o $P9OPTS,ro,cache=${HOSTROOT_CACHE:-none} hostroot /host 2>/dev/null" ||
    fail "cannot mount the 9p host root (mount_tag=hostroot)"
[ -x /host/usr/bin/env ] || fail "the host root has no /usr/bin/env"

# --- the chroot of the host root --------------------------------------------
H=/host
mount -t proc proc $H/proc || fail "mount proc in the chroot"
mount -t sysfs sysfs $H/sys || fail "mount sysfs in the chroot"
mount -t devtmpfs devtmpfs $H/dev || fail "mount devtmpfs in the chroot"
mkdir -p $H/dev/pts $H/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $H/dev/pts || fail "mount devpts"
mount -t tmpfs -o mode=1777 tmpfs $H/dev/shm || fail "mount /dev/shm"
# Keep the host's /tmp reachable for --share before the guest's own tmpfs hides it.
mkdir -p /hosttmp
mount -o bind $H/tmp /hosttmp || fail "bind the host /tmp aside"
mount -t tmpfs -o mode=1777 tmpfs $H/tmp || fail "mount /tmp"
for d in $TMP_SHARES; do
    mkdir -p "$H$d" && mount -o bind "/hosttmp${d#/tmp}" "$H$d" || fail "share $d into the guest"
done
mount -t tmpfs -o mode=755 tmpfs $H/run || fail "mount /run"
ln -sfn /proc/self/fd $H/dev/fd
ln -sfn /proc/self/fd/0 $H/dev/stdin
ln -sfn /proc/self/fd/1 $H/dev/stdout
ln -sfn /proc/self/fd/2 $H/dev/stderr
mkdir -p $H/run/openib-job $H/run/openib $H/run/lock $H/run/user
mount -o bind /job $H/run/openib-job || fail "bind the job share into the chroot"

hostname "$GUEST_HOSTNAME"
# The host's /etc/hosts plus this guest's name and the peers; no DNS server.
{
    cat $H/etc/hosts 2>/dev/null
    echo "127.0.1.1 $GUEST_HOSTNAME"
    for e in $ADD_HOSTS; do
        echo "${e%%=*} ${e#*=}"
    done
} >$H/run/openib/hosts
: >$H/run/openib/resolv.conf
[ -e $H/etc/hosts ] && mount -o bind $H/run/openib/hosts $H/etc/hosts
[ -e $H/etc/resolv.conf ] && mount -o bind $H/run/openib/resolv.conf $H/etc/resolv.conf 2>/dev/null

# --- network and rxe0 --------------------------------------------------------
# busybox's ip where it can (each program of the host root costs a second
# or more to load over 9p under TCG); iproute2's rdma for the rxe link.
ip link set lo up || fail "ip link set lo up"
case "$NET" in
veth)
    NETDEV=veth0
    # busybox's ip ignores "peer name"; without one the kernel names the
    # peer veth%d, which is veth0 in a fresh guest.  iproute2 if that fails.
    if ! { ip link add name veth1 type veth 2>/dev/null && [ -e /sys/class/net/veth0 ]; }; then
        ip link del veth1 2>/dev/null
        hx ip link add veth0 type veth peer name veth1 || fail "cannot create veth0/veth1"
    fi
    ip link set veth0 address "$GUEST_MAC" || fail "ip link set veth0 address $GUEST_MAC"
    ip addr add "$GUEST_IP" dev veth0 || fail "ip addr add $GUEST_IP dev veth0"
    ip link set veth1 up || fail "ip link set veth1 up"
    ip link set veth0 up || fail "ip link set veth0 up"
    ;;
socket)
    NETDEV=eth0
    wait_for 50 "[ -e /sys/class/net/eth0 ]" || fail "no eth0 (virtio-net) in the guest"
    ip addr add "$GUEST_IP" dev eth0 || fail "ip addr add $GUEST_IP dev eth0"
    ip link set eth0 up || fail "ip link set eth0 up"
    ;;
*)
    fail "unknown NET=$NET"
    ;;
esac
say "network up"
hx rdma link add rxe0 type rxe netdev "$NETDEV" ||
    fail "rdma link add rxe0 type rxe netdev $NETDEV failed"
PORT=/sys/class/infiniband/rxe0/ports/1
if [ "$RXE_DOWN" = 1 ]; then
    ip link set "$NETDEV" down || fail "ip link set $NETDEV down"
    wait_for 50 "! grep -q ACTIVE $PORT/state" ||
        fail "rxe0 port 1 still ACTIVE after $NETDEV went down"
else
    wait_for 100 "grep -q ACTIVE $PORT/state" ||
        fail "rxe0 port 1 did not become ACTIVE: $(cat $PORT/state)"
    # The IPv4 GID (index 1) follows the address; wait until it is there.
    wait_for 50 "[ \"\$(cat $PORT/gids/1)\" != 0000:0000:0000:0000:0000:0000:0000:0000 ]" ||
        say "warning: rxe0 GID index 1 is still empty"
fi
say "rxe0 on $NETDEV: $(cat $PORT/state), $(cat $PORT/phys_state)"

# --- the command -------------------------------------------------------------
if [ "$MODE" = shell ]; then
    say "interactive shell (exit it to power off)"
    setsid cttyhack chroot /host /usr/bin/env -i TERM=linux /bin/bash /run/openib-job/run.sh
    sync
    poweroff -f
    sleep 30
fi

say "command started"
# The host kills the guest at its --timeout; GUEST_TIMEOUT (a bit later) is
# for a host side that died without doing so.
timeout -s KILL "${GUEST_TIMEOUT:-3600}" chroot /host /usr/bin/env -i /bin/bash /run/openib-job/run.sh \
    </dev/null >/job/stdout 2>/job/stderr
rc=$?
echo "$rc" >/job/rc.tmp && mv /job/rc.tmp /job/rc
say "command finished with status $rc"
sync
poweroff -f
sleep 30
