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

// nodeBoot is the bootstrap of a warm node. The node is started exactly as a
// cold run's, `node /sandbox/main.js`, with NODE_OPTIONS (warmEnviron) asking
// it to preload /dev/stdin first, and the bootstrap's file (pid1.WarmBootPath,
// which the root's build writes) as its stdin. Node runs a preload from its
// own start (prepareMainThreadExecution), before its main module, and resolves
// /dev/stdin through /proc/self/fd/0 to the file. The bootstrap puts /dev/null
// in its place as descriptor 0, which a cold node's spawner gives it, removes
// its file and its entries in the module caches, says it is ready, and blocks
// until it has the run's environment. When it returns, node goes on to run
// /sandbox/main.js, in place by then, from its own start as a cold node does:
// require.main, process.argv, process.execArgv, the command line and every
// stack and its depth are a cold run's. (Before, the bootstrap was node's main
// script and ran the program from the event loop: each stack ended in
// processImmediate, not run_main_module, and a recursion went 3 levels less.)
// The loader's realpath cache, which it hands to fs.realpathSync, held where
// /dev/stdin and /proc/PID/fd/0 led (the removed file): the bootstrap takes it
// from one resolution through fs.realpathSync and empties it, as a cold
// node's is before its main module. A worker thread inherits its preloads
// from the process, and loads /dev/stdin again: /dev/null by then, an empty
// module (and so does the thread of module.register's hooks). It takes the loader's
// Module from its own module, not require('module'), which would load modules
// a cold start does not (process.moduleLoadList). It empties
// process._preload_modules, which listed /dev/stdin (the warm corpus probe
// of 2026-12-06). Its socket is descriptor 63, pid1.WarmFD (TestNodeBootFD).
const nodeBoot = `'use strict';
const fs = require('fs'), Module = module.constructor;
fs.closeSync(0);
if (fs.openSync('/dev/null', 'r') !== 0) throw new Error('brig: /dev/null did not take descriptor 0');
fs.unlinkSync(__filename);
delete require.cache[__filename];
const forget = () => { for (const k of Object.keys(Module._pathCache)) if (Module._pathCache[k] === __filename) delete Module._pathCache[k]; };
forget();
const realpathSync = fs.realpathSync;
let links;
fs.realpathSync = function (p, options) { for (const k of Object.getOwnPropertySymbols(options ?? {})) links = options[k]; return realpathSync.apply(this, arguments); };
try { require.resolve('/dev/stdin'); } catch {} finally { fs.realpathSync = realpathSync; }
if (typeof links?.clear === 'function') links.clear();
forget();
if (Array.isArray(process._preload_modules)) process._preload_modules.length = 0;
fs.writeSync(63, 'r');
const env = JSON.parse(fs.readFileSync(63, 'utf8'));
fs.closeSync(63);
for (const k of Object.keys(process.env)) delete process.env[k];
Object.assign(process.env, env);
`

// warmArgv is the command line of a warm JavaScript sandbox's waiting
// interpreter, a cold run's (a warm Python sandbox's is forked by a zygote:
// zygote.go), and warmEnviron its environment: brig's own names and the
// preload of its bootstrap (nodeBoot), which the bootstrap replaces with the
// run's environment.
func warmArgv(root *rootfs.Root) []string {
	return root.Argv(scriptPath(rootfs.JavaScript))
}

func warmEnviron() []string {
	return append(Environ(nil), "NODE_OPTIONS=--require /dev/stdin")
}

// startupEnvPrefixes are the variables an interpreter reads at its own start:
// a run that sets one (the request's or brig's) can't use a warm interpreter.
// CPython sets its locale, UTF-8 mode and stdio encodings from LC_* at start,
// and Node its ICU default locale (Intl, toLocaleString); LANG is brig's own.
// OpenSSL reads OPENSSL_CONF, OPENSSL_MODULES and OPENSSL_ia32cap when it
// initialises, in Node's start and, for Python, in the zygote's import of
// hashlib (a warm run with OPENSSL_CONF enabling the legacy provider had no
// md4). The site-packages' .pth files run at CPython's start, in the
// zygote's: setuptools' distutils-precedence.pth reads
// SETUPTOOLS_USE_DISTUTILS (which distutils an import finds). Both languages
// also take startupEnvLoader.
var startupEnvPrefixes = map[rootfs.Language][]string{
	rootfs.Python:     append([]string{"PYTHON", "LC_", "OPENSSL_", "SETUPTOOLS_USE_DISTUTILS"}, startupEnvLoader...),
	rootfs.JavaScript: append([]string{"NODE_", "UV_", "OPENSSL_", "SSL_CERT_", "LC_"}, startupEnvLoader...),
}

// startupEnvLoader are what the C library and its loader read at an exec
// (LD_PRELOAD, LD_LIBRARY_PATH, LD_DEBUG..., malloc's settings, the
// tunables) or at the interpreter's setlocale (LOCPATH): a warm interpreter
// was exec'd without them, and would silently ignore them.
var startupEnvLoader = []string{"LD_", "MALLOC_", "GLIBC_TUNABLES", "LOCPATH"}

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
