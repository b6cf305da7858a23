#ifndef SETTEE_CJAVASCRIPTCORE_SHIM_H
#define SETTEE_CJAVASCRIPTCORE_SHIM_H

#include <JavaScriptCore/JavaScript.h>
#include <stdbool.h>

// The execution time limit (JSC's watchdog) is exported by libjavascriptcoregtk-4.1 (checked with
// `nm -D`: JSContextGroupSetExecutionTimeLimit / JSContextGroupClearExecutionTimeLimit are `T`
// symbols) but declared only in the private header JSContextRefPrivate.h, which the -dev package does
// not ship. These are the declarations from that header (WebKit, same ABI since 2013).
typedef bool (*JSShouldTerminateCallback)(JSContextRef ctx, void *context);
JS_EXPORT void JSContextGroupSetExecutionTimeLimit(JSContextGroupRef group, double limit,
                                                   JSShouldTerminateCallback callback, void *context);
JS_EXPORT void JSContextGroupClearExecutionTimeLimit(JSContextGroupRef group);

// The heap's statistics (an object with `heapSize`, `heapCapacity`, `extraMemorySize`, ...), exported by the same
// library (`nm -D`: a `T` symbol) and declared only in the private header JSBasePrivate.h. The engine reads the
// heap's size from it when a call has run one check interval, to stop a call that holds too much.
JS_EXPORT JSObjectRef JSGetMemoryUsageStatistics(JSContextRef ctx);
// A full collection now (JSBasePrivate.h too): after a call stopped for its heap, its garbage is collected before
// the next call's heap is counted.
JS_EXPORT void JSSynchronousGarbageCollectForDebugging(JSContextRef ctx);

#endif
