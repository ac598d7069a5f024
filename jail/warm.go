package jail

import (
	"strings"

	"github.com/brig-sandbox/brig/rootfs"
)

// Warm starts: a pooled sandbox of a language may hold its interpreter already
// started, as the run's program process, waiting for its program. The
// interpreter's own start (most of a short run's time) then happens while the
// sandbox waits in the pool, not while the run waits. It is the same sandbox as
// a cold run's, used for one run only: nothing carries over from one run to
// the next, and no request data reaches the process before it belongs to its
// run. A JavaScript interpreter is spawned exactly as a cold run's, by
// spawnInUserNS; a Python one is forked from a zygote, an interpreter started
// and initialised once, and joins the sandbox as spawnInUserNS would have
// started it (zygote.go), which saves the interpreter's start in CPU too.
//
// The waiting interpreter runs a bootstrap (nodeBoot below; zygote.py's end
// for Python) that says it is ready (one
// byte on pid1.WarmFD, a socket) and then reads one JSON object, the run's
// environment, from it: the init writes it once the program file is in place,
// and closes the socket. The bootstrap then makes the process look as
// `python3 -u /sandbox/main.py` or `node /sandbox/main.js` would: the
// environment, argv, __main__ (or require.main) and tracebacks without
// bootstrap frames. What it can't change is what the interpreter reads from
// its environment at its own start (PYTHON* and NODE_* variables), so a run
// whose environment sets such a name takes the cold path (WarmEligible).

// nodeBoot is run as `node -e nodeBoot`. -e makes globals a script does not
// have: every public built-in module by its name (fs, path...: a program that
// used path.join without requiring it would work warm and fail cold), and
// require, module, exports, __filename and __dirname. They are removed before
// the program runs; process, console and crypto, which -e leaves as they are
// (it skips names already defined), are a script's globals too.
const nodeBoot = `'use strict';
const fs = require('fs'), Module = require('module');
for (const name of Module.builtinModules) {
  if (!name.includes('/') && !name.startsWith('_') && name !== 'process' && name !== 'console' && name !== 'crypto') delete globalThis[name];
}
for (const name of ['require', 'module', 'exports', '__filename', '__dirname']) delete globalThis[name];
fs.writeSync(3, 'r');
const env = JSON.parse(fs.readFileSync(3, 'utf8'));
fs.closeSync(3);
for (const k of Object.keys(process.env)) delete process.env[k];
Object.assign(process.env, env);
process.argv.length = 1;
process.argv.push('/sandbox/main.js');
process.execArgv.length = 0;
Module.runMain();
`

// warmArgv is the command line of a warm JavaScript sandbox's waiting
// interpreter. (A warm Python sandbox's is forked by a zygote: zygote.go.)
func warmArgv(root *rootfs.Root) []string {
	return []string{root.Interpreter, "-e", nodeBoot}
}

// startupEnvPrefixes are the variables an interpreter reads at its own start:
// a run that sets one (the request's or brig's) can't use a warm interpreter.
// CPython sets its locale, UTF-8 mode and stdio encodings from LC_* at start,
// and Node its ICU default locale (Intl, toLocaleString); LANG is brig's own.
var startupEnvPrefixes = map[rootfs.Language][]string{
	rootfs.Python:     {"PYTHON", "LC_"},
	rootfs.JavaScript: {"NODE_", "UV_", "OPENSSL_", "SSL_CERT_", "LC_"},
}

// startupEnvAllowed are the ones a warm interpreter still honours, because its
// bootstrap applies them (PYTHONPATH: the package layer).
var startupEnvAllowed = map[string]bool{"PYTHONPATH": true}

// WarmEligible reports whether a run of lang with environment env (everything
// the program gets) can use a warm interpreter, and if not, which name keeps
// it cold.
func WarmEligible(lang rootfs.Language, env map[string]string) (bool, string) {
	for k := range env {
		if startupEnvAllowed[k] {
			continue
		}
		for _, p := range startupEnvPrefixes[lang] {
			if strings.HasPrefix(k, p) {
				return false, k
			}
		}
	}
	return true, ""
}
