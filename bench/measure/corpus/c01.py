import json, re, dataclasses, statistics
@dataclasses.dataclass
class P:
    name: str
    score: float
ps = [P("n%d" % i, i * 1.5) for i in range(50)]
s = json.dumps([dataclasses.asdict(p) for p in ps])
m = re.findall(r'"name": "(n\d+)"', s)
print(len(m), statistics.mean(p.score for p in ps))
