#!/bin/sh
# Every dynamic symbol libacc defines must be acc_* (or the version node ACC_1.0).
lib="$1"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//')
bad=$(printf '%s\n' "$syms" | grep -v -e '^acc_' -e '^ACC_[0-9.]*$' -e '^$')
count=$(printf '%s\n' "$syms" | grep -c '^acc_')
if [ -n "$bad" ]; then
  echo "libacc exports symbols outside acc_*:"; printf '%s\n' "$bad" | head -20
  echo "0 passed, 1 failed"; exit 1
fi
if [ "$count" -lt 40 ]; then echo "only $count acc_* exports: the version script lost some"; echo "0 passed, 1 failed"; exit 1; fi
echo "$count acc_* symbols exported, nothing else"
echo "1 passed, 0 failed"
