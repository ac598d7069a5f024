import hashlib, base64, struct, uuid, string, textwrap
print(hashlib.sha256(b'abc').hexdigest()[:16], base64.b64encode(b'hello').decode())
print(struct.pack('<IH', 1, 2).hex(), len(str(uuid.uuid4())), string.ascii_lowercase[:5])
print(textwrap.fill('word ' * 30, width=40))
