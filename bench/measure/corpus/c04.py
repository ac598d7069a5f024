import os, pathlib, tempfile, shutil, glob
d = pathlib.Path(tempfile.mkdtemp())
for i in range(5):
    (d / f"f{i}.txt").write_text("line\n" * i)
print(sorted(p.name for p in d.glob("*.txt")), sum(len(p.read_text().splitlines()) for p in d.iterdir()))
shutil.rmtree(d)
print(os.getcwd(), len(glob.glob('/usr/lib/python3*/json/*.py')) > 0)
