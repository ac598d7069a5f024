import csv, io, pprint, copy, argparse
buf = io.StringIO("a,b\n1,2\n3,4\n")
rows = list(csv.DictReader(buf)); pprint.pprint(rows)
print(copy.deepcopy(rows) == rows)
p = argparse.ArgumentParser(); p.add_argument('--n', type=int, default=3)
print(p.parse_args([]).n)
