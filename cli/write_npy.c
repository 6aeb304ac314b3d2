/*
 * write_npy.c: matrices as NumPy .npy files (not written yet).
 */
#include "write.h"

int npy_write(FILE *fp, const matrix *m)
{
	(void)fp;
	(void)m;
	return -1;
}
