#include "textflag.h"

// func Hlt()
TEXT ·Hlt(SB), NOSPLIT, $0-0
	HLT
	RET
