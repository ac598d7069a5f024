// Package victim holds what seccomp's victim tests cannot write in Go: a system
// call made through the i386 ABI. It is imported only by tests.
package victim
