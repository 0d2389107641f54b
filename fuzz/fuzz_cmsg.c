/* libFuzzer harness: the control-message walk of the notify socket's
 * recvmsg (unix_socket.c), fed arbitrary bytes as control data. The
 * descriptors it reports are only numbers here (never closed); the
 * invariants are that it reads nothing past the buffer (ASan), reports at
 * most TK_SCM_FDS_MAX of them, and leaves a sender that says nothing
 * empty. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "unix_socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Exactly size bytes, aligned as recvmsg's buffer is: a read past the
	 * end is an ASan report. */
	void *ctl = malloc(size ? size : 1);
	int fds[TK_SCM_FDS_MAX];
	struct tk_unix_sender s;
	size_t nfds;

	if (ctl == NULL)
		return 0;
	memcpy(ctl, data, size);
	tk_unix_cmsg_parse(ctl, size, &s, fds, &nfds);
	if (nfds > TK_SCM_FDS_MAX)
		abort();
	if (size < sizeof(struct cmsghdr) &&
	    (nfds != 0 || s.pidfd != -1 || s.pid != 0 || s.sent.tv_sec != 0))
		abort();
	free(ctl);
	return 0;
}
