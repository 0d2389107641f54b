/* libFuzzer harness: the radix sort that puts BPF records in pid order.
 * Any pids, duplicates and pids past PID_MAX_LIMIT included: the result
 * must be a permutation of the input, ordered by pid, stable. */
#include <stdlib.h>
#include <string.h>

#include "recbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n = size / sizeof(uint32_t);
	uint64_t *keys = malloc(2 * (n ? n : 1) * sizeof *keys);
	unsigned char *seen = calloc(n ? n : 1, 1);
	const uint64_t *sorted;
	uint32_t max_pid = 0;

	if (keys == NULL || seen == NULL)
		abort();
	for (size_t i = 0; i < n; i++) {
		uint32_t pid;

		memcpy(&pid, data + i * sizeof pid, sizeof pid);
		keys[i] = (uint64_t)pid << 32 | i;
		if (pid > max_pid)
			max_pid = pid;
	}
	sorted = tk_pid_keys_sort(keys, keys + n, n, max_pid);
	for (size_t i = 0; i < n; i++) {
		uint32_t index = (uint32_t)sorted[i];
		uint32_t pid;

		memcpy(&pid, data + (size_t)index * sizeof pid, sizeof pid);
		if (index >= n || seen[index]++ || (uint32_t)(sorted[i] >> 32) != pid)
			abort();        /* not a permutation of the input */
		if (i > 0 && (sorted[i - 1] >> 32 > sorted[i] >> 32 ||
		              (sorted[i - 1] >> 32 == sorted[i] >> 32 && (uint32_t)sorted[i - 1] > index)))
			abort();        /* out of pid order, or not stable */
	}
	free(keys);
	free(seen);
	return 0;
}
