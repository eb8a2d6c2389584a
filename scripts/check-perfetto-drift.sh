#!/usr/bin/env bash
# Fails if perfetto/src/generated/ differs from what the generator produces
# from perfetto/proto/perfetto_subset.proto (someone edited one without the other),
# or if a field number, type, repeatedness, packedness or enum value of the
# subset differs from the official schema (`pip install perfetto protobuf`;
# that part is skipped with a notice when python3 cannot import it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$root/scripts/gen-perfetto-proto.sh" "$tmp"
if ! diff -r "$root/perfetto/src/generated" "$tmp"; then
    echo "perfetto/src/generated is out of date: run scripts/gen-perfetto-proto.sh and commit" >&2
    exit 1
fi
echo "perfetto generated code is up to date"

if ! python3 -c 'from perfetto.protos.perfetto.trace import perfetto_trace_pb2' 2>/dev/null; then
    echo "NOTICE: python3 cannot import perfetto_trace_pb2; schema comparison skipped" >&2
    exit 0
fi
python3 - "$root/perfetto/src/generated/perfetto_subset.fds" <<'PY'
import sys
from google.protobuf import descriptor_pb2
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as up
pool = up.DESCRIPTOR.pool
fds = descriptor_pb2.FileDescriptorSet.FromString(open(sys.argv[1], "rb").read())
problems = 0
checked = 0
def bad(msg):
    global problems
    problems += 1
    print("schema:", msg)
def check_enum(full, e):
    global checked
    u = pool.FindEnumTypeByName(full)
    for v in e.value:
        checked += 1
        uv = u.values_by_name.get(v.name)
        if uv is None or uv.number != v.number:
            bad("%s.%s = %d, upstream %s" % (full, v.name, v.number, uv and uv.number))
def check_msg(full, m):
    global checked
    try:
        u = pool.FindMessageTypeByName(full)
    except KeyError:
        return bad("message %s not upstream" % full)
    for f in m.field:
        checked += 1
        uf = u.fields_by_name.get(f.name)
        if uf is None:
            bad("%s.%s not upstream" % (full, f.name)); continue
        ours_rep = f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
        up_rep = uf.is_repeated if hasattr(uf, "is_repeated") else uf.label == uf.LABEL_REPEATED
        ours_packed = f.options.packed if f.options.HasField("packed") else False
        up_packed = uf.is_packed if hasattr(uf, "is_packed") else (uf.GetOptions().packed if uf.GetOptions().HasField("packed") else False)
        if uf.number != f.number or uf.type != f.type or ours_rep != up_rep or ours_packed != up_packed:
            bad("%s.%s: ours #%d type %d rep %s packed %s; upstream #%d type %d rep %s packed %s" % (
                full, f.name, f.number, f.type, ours_rep, ours_packed, uf.number, uf.type, up_rep, up_packed))
    for n in m.nested_type:
        check_msg(full + "." + n.name, n)
    for e in m.enum_type:
        check_enum(full + "." + e.name, e)
for fd in fds.file:
    for m in fd.message_type:
        check_msg(fd.package + "." + m.name, m)
    for e in fd.enum_type:
        check_enum(fd.package + "." + e.name, e)
print("schema: %d fields and enum values checked against upstream, %d problems" % (checked, problems))
sys.exit(1 if problems else 0)
PY
