import sys
data = [{"id": i, "tags": ["t%d" % (i % 3)], "v": i / 3} for i in range(200)]
by = {}
for d in data:
    for t in d["tags"]: by.setdefault(t, []).append(d["v"])
print({k: round(sum(v) / len(v), 2) for k, v in sorted(by.items())}, file=sys.stderr)
print(max(data, key=lambda d: d["v"])["id"], f"{3.14159:.2f}", "done".upper())
