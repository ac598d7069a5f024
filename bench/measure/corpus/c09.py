import threading, queue
q = queue.Queue()
def work(i): q.put(i * i)
ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print(sorted(q.get() for _ in range(4)))
