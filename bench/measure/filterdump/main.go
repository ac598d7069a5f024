// Command filterdump prints brig's compiled seccomp filters, one per line: the
// policy's name, its instruction count and the program in hex, for
// bench/measure/filter_load.py.
//
//	go run -tags urfave_cli_no_docs ./bench/measure/filterdump
package main

import (
	"encoding/hex"
	"fmt"
	"os"

	"github.com/brig-sandbox/brig/seccomp"
)

func main() {
	for _, p := range []struct {
		name   string
		policy seccomp.Policy
	}{
		{"Default", seccomp.Default()}, {"Spawner", seccomp.Spawner()}, {"Zygote", seccomp.Zygote()},
		{"ZygoteChild", seccomp.ZygoteChild()}, {"ZygoteProgram", seccomp.ZygoteProgram()},
		{"SpawnedProgram", seccomp.SpawnedProgram()},
	} {
		prog, err := seccomp.Compile(p.policy)
		if err != nil {
			fmt.Fprintf(os.Stderr, "filterdump: compiling %s: %v\n", p.name, err)
			os.Exit(1)
		}
		fmt.Println(p.name, len(prog), hex.EncodeToString(prog.Marshal()))
	}
}
