#!/bin/sh
# TEST HARNESS ONLY -- used by run-h200.sh when the lent host has no sudo: Ansible's `become` runs
# `sudo -H -S -n -u USER /bin/sh -c '...'`; this does the same with runuser (util-linux).
user=root
while [ $# -gt 0 ]; do
  case "$1" in
    -u) user="$2"; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
exec runuser -u "$user" -- "$@"
