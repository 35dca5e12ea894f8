#!/bin/sh
# Two PostgreSQL clusters for the failover test: a primary and a streaming standby of it, on
# 127.0.0.1 (trust authentication, database `test`). Run as root or as an ordinary user; as
# root the servers run as the `postgres` user (PostgreSQL refuses root).
#
#   failover-clusters.sh up DIR PRIMARY_PORT STANDBY_PORT   fresh clusters under DIR
#   failover-clusters.sh stop DIR primary|standby           stops one at once (immediate)
#   failover-clusters.sh start DIR primary|standby          starts one again, on its port
#   failover-clusters.sh promote DIR                        makes the standby the primary
#   failover-clusters.sh down DIR                           stops both, removes DIR
set -eu

bin=$(pg_config --bindir 2>/dev/null || dirname "$(command -v pg_ctl)")
as() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

cmd=$1
dir=$2
case $cmd in
up)
    pport=$3
    sport=$4
    "$0" down "$dir" >/dev/null 2>&1 || true
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as "$bin/initdb" -D "$dir/primary" -U postgres --auth=trust --no-sync >"$dir/initdb.log"
    cat >>"$dir/primary/postgresql.conf" <<CONF
port = $pport
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = off
wal_level = replica
hot_standby = on
CONF
    as "$bin/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w start >/dev/null
    as "$bin/psql" -h 127.0.0.1 -p "$pport" -U postgres -q -c "CREATE DATABASE test" postgres
    as "$bin/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$dir/standby" -R -X stream -c fast
    echo "port = $sport" >>"$dir/standby/postgresql.conf"
    as "$bin/pg_ctl" -D "$dir/standby" -l "$dir/standby.log" -w start >/dev/null
    ;;
stop)
    as "$bin/pg_ctl" -D "$dir/$3" -m immediate -w stop >/dev/null
    ;;
start)
    as "$bin/pg_ctl" -D "$dir/$3" -l "$dir/$3.log" -w start >/dev/null
    ;;
promote)
    as "$bin/pg_ctl" -D "$dir/standby" -w promote >/dev/null
    ;;
down)
    for c in primary standby; do
        [ -d "$dir/$c" ] && as "$bin/pg_ctl" -D "$dir/$c" -m immediate -w stop >/dev/null 2>&1 || true
    done
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 up|stop|start|promote|down DIR ..." >&2
    exit 2
    ;;
esac
