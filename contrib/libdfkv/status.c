// dfkv_status_name lives in C because it returns static strings: a Go
// export could only return memory it would have to leak.
#include "dfkv.h"

const char* dfkv_status_name(int status) {
    switch (status) {
    case DFKV_OK: return "OK";
    case DFKV_NOT_FOUND: return "NOT_FOUND";
    case DFKV_INVALID: return "INVALID";
    case DFKV_QUOTA_EXCEEDED: return "QUOTA_EXCEEDED";
    case DFKV_CACHE_FULL: return "CACHE_FULL";
    case DFKV_IO_ERROR: return "IO_ERROR";
    case DFKV_TIMEOUT: return "TIMEOUT";
    case DFKV_UNAVAILABLE: return "UNAVAILABLE";
    case DFKV_UNSUPPORTED: return "UNSUPPORTED";
    case DFKV_EPOCH_MISMATCH: return "EPOCH_MISMATCH";
    case DFKV_TOO_LARGE: return "TOO_LARGE";
    case DFKV_INTERNAL: return "INTERNAL";
    case DFKV_UNAUTHENTICATED: return "UNAUTHENTICATED";
    case DFKV_FORBIDDEN: return "FORBIDDEN";
    default: return "UNKNOWN";
    }
}
