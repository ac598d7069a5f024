#include "textflag.h"

// func Int80(nr uintptr) uintptr
TEXT ·Int80(SB), NOSPLIT, $0-16
	MOVQ nr+0(FP), AX
	INT  $0x80
	MOVQ AX, ret+8(FP)
	RET
