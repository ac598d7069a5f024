# Run by TestInterpretersUnderFilter under the default seccomp policy. Each line
# it prints is checked; any exception exits non-zero.
import hashlib
import json
import os
import socket
import subprocess
import tempfile
import threading

results = []
lock = threading.Lock()


def work(i):
    digest = hashlib.sha256(str(i).encode()).hexdigest()
    with lock:
        results.append(digest)


threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("threads", len(results))

out = subprocess.run(["/bin/sh", "-c", "echo hi"], capture_output=True, text=True, check=True)
print("subprocess", out.stdout.strip())


def echo_upper(server):
    conn, _ = server.accept()
    with conn:
        conn.sendall(conn.recv(64).upper())


def round_trip(family, address):
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.bind(address)
        server.listen(1)
        t = threading.Thread(target=echo_upper, args=(server,))
        t.start()
        with socket.socket(family, socket.SOCK_STREAM) as client:
            client.connect(server.getsockname())
            client.sendall(b"ping")
            reply = client.recv(64).decode()
        t.join()
    return reply


print("inet", round_trip(socket.AF_INET, ("127.0.0.1", 0)))
with tempfile.TemporaryDirectory() as d:
    print("unix", round_trip(socket.AF_UNIX, os.path.join(d, "sock")))

a, b = socket.socketpair()
a.sendall(b"pair")
print("socketpair", b.recv(64).decode())
a.close()
b.close()

print("json", json.dumps(json.loads('{"b": [1, 2], "a": null}'), sort_keys=True))
print("sha256", hashlib.sha256(b"brig").hexdigest())

with tempfile.NamedTemporaryFile("w+") as f:
    f.write("scratch")
    f.flush()
    f.seek(0)
    print("tempfile", f.read())
