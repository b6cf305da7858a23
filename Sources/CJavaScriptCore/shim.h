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

#endif
