#!/bin/bash
# --json output is JSON whatever the names in it: tags holding quotes, backslashes and bytes
# that are not UTF-8 (a store may list what another writer put there) come out escaped or
# replaced, and a strict parser reads them.  Such names are outside the reference grammar
# (store/ref.c), so they are listed but not resolved.
. "$(dirname "$0")/../lib/common.sh"
need_cmd python3
workdir
store=$WORK/store
mkdir -p "$WORK/src"
echo hello >"$WORK/src/f"
"$LAZYROOT" build "$WORK/src" --store "dir:$store" --tag plain:1 --no-progress >/dev/null
for name in 'q"uote' 'back\slash' $'bad\xffbyte' $'cut\xc3'; do
	cp "$store/tags/plain:1" "$store/tags/$name:1"
done

"$LAZYROOT" image ls --store "dir:$store" --json >"$WORK/ls.json"
check python3 - "$WORK/ls.json" <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read()
doc = json.loads(raw.decode("utf-8", errors="strict"))
refs = sorted(e["ref"] for e in doc)
want = sorted(n + ":1" for n in ["plain", 'q"uote', 'back\\slash', 'bad\ufffdbyte', 'cut\ufffd'])
assert refs == want, refs
index = {e["ref"]: e["index"] for e in doc}
assert len(index["plain:1"]) == 32, doc
assert all(isinstance(v, str) for v in index.values()), doc
PY
check_status 0 "$LAZYROOT" image inspect plain:1 --store "dir:$store" --json
"$LAZYROOT" image inspect plain:1 --store "dir:$store" --json >"$WORK/inspect.json"
check python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["files"] == 1 and d["file_bytes"] == 6, d' \
	"$WORK/inspect.json"
check_not "$LAZYROOT" image inspect 'q"uote:1' --store "dir:$store" --json
