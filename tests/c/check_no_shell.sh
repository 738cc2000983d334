#!/bin/sh
# No shell ever interprets a user string (docs/security.md): none of libacc's libraries nor the acc launcher
# imports system(), popen() or wordexp() (they run /bin/sh), and only execve-style calls start programs.
status=0
for f in "$@"; do
  used=$(nm -D --undefined-only "$f" | awk '{print $2}' | sed 's/@.*//' | grep -xE 'system|popen|wordexp')
  if [ -n "$used" ]; then
    echo "$f imports $(echo $used): a shell could interpret its arguments"
    status=1
  fi
done
if [ $status -ne 0 ]; then echo "0 passed, 1 failed"; exit 1; fi
echo "$# binaries checked: no system(), popen() or wordexp()"
echo "1 passed, 0 failed"
