package rootfs

// CheckRootsOnly is checkRootsOnly for the external tests of built trees.
var CheckRootsOnly = checkRootsOnly
