#!/usr/bin/env bash
# Prove the README works for a newcomer: clone this repository into a temporary directory and run
# its two commands there, timing each. Usage: tools/fresh_clone.sh [branch]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
branch="${1:-main}"
dir="$(mktemp -d)"
git clone --quiet --branch "$branch" "$src" "$dir/repo"
cd "$dir/repo"
start=$(date +%s)
make book
mid=$(date +%s)
make test
end=$(date +%s)
echo "fresh clone in $dir/repo: make book took $((mid - start)) s (including the install), make test $((end - mid)) s"
