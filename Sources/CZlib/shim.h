#include <zlib.h>

// deflateInit2 and inflateInit2 are macros (they pass the header's version and z_stream size), which Swift cannot
// call: these wrappers can be.
static inline int CZlib_deflateInit2(z_streamp strm, int level, int windowBits, int memLevel) {
    return deflateInit2(strm, level, Z_DEFLATED, windowBits, memLevel, Z_DEFAULT_STRATEGY);
}

static inline int CZlib_inflateInit2(z_streamp strm, int windowBits) {
    return inflateInit2(strm, windowBits);
}
