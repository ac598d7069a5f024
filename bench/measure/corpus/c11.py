def primes(n):
    s = bytearray([1]) * (n + 1); s[0:2] = b'\x00\x00'
    for i in range(2, int(n ** 0.5) + 1):
        if s[i]: s[i*i::i] = bytearray(len(s[i*i::i]))
    return [i for i, v in enumerate(s) if v]
p = primes(100000); print(len(p), p[-1])
class Node:
    def __init__(self, v, nxt=None): self.v, self.nxt = v, nxt
h = None
for i in range(1000): h = Node(i, h)
n = 0
while h: n += h.v; h = h.nxt
print(n, sorted({x % 17 for x in range(1000)})[:5], "%s-%r" % ('a', [1, 2]))
