import sys
print("hello from python", sys.version.split()[0])
