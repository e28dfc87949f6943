/*
 * implementation.c
 *		The client's implementation, built as C for the C++ test programs:
 *		a C++ file includes the header for its declarations only.
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"
