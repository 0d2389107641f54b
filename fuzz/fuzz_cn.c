/* libFuzzer harness: the proc connector datagram parser, fed arbitrary
 * bytes at arbitrary alignment. */
#include <stdlib.h>
#include <string.h>

#include "events.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* One byte off an 8-byte boundary: the parser must not assume any. */
	char *block = malloc(size + 1);
	struct tk_cn_message m;
	int r;

	if (block == NULL)
		return 0;
	memcpy(block + 1, data, size);
	r = tk_cn_parse(block + 1, size, &m);
	if (r < -1000 || r > 1)
		abort();
	if (r == 1 && m.event.comm[sizeof m.event.comm - 1] != '\0')
		abort();
	free(block);
	return 0;
}
