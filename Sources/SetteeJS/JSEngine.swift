import CJavaScriptCore
import SetteeCore

#if canImport(Glibc)
    import Glibc
#endif

/// An argument for `JSEngine.call`: values cross the boundary as JSON text or scalars, never as
/// shared objects, so nothing of one call leaks into the next.
public enum JSArgument: Sendable {
    /// UTF-8 JSON text, parsed by JSC's native `JSON.parse`.
    case json([UInt8])
    case string(String)
    /// A new array of strings, each made from UTF-8 bytes exactly as `.json` makes the text it parses (text
    /// up to a NUL byte; invalid UTF-8 gives ""), so a script's `JSON.parse(s)` of an element succeeds or
    /// fails exactly as `.json` of the same bytes would. One call hands over a batch of documents this way.
    case strings([[UInt8]])
    /// A new array of compiled functions (of the engine called).
    case functions([JSFunction])
    case number(Double)
    case bool(Bool)
    case null
    case undefined
}

/// A compiled function, usable only with the engine that compiled it, on that engine's thread (both
/// checked on every call; Sendable only so a function can travel inside a `JSArgument`).
public struct JSFunction: @unchecked Sendable {
    fileprivate let object: JSObjectRef
    fileprivate let engineID: ObjectIdentifier
}

/// The arguments a native function receives; valid only during the callback.
public struct JSCallArguments {
    fileprivate let context: JSContextRef
    fileprivate let values: UnsafePointer<JSValueRef?>?
    /// How many arguments the script passed.
    public let count: Int

    fileprivate init(context: JSContextRef, values: UnsafePointer<JSValueRef?>?, count: Int) {
        self.context = context
        self.values = values
        self.count = count
    }

    private func value(_ i: Int) -> JSValueRef? { i < count ? values?[i] : nil }

    /// True when the argument is missing or `undefined`.
    public func isUndefined(_ i: Int) -> Bool {
        guard let v = value(i) else { return true }
        return JSValueIsUndefined(context, v)
    }

    /// The argument as compact JSON (`JSON.stringify`); `undefined`, functions and missing
    /// arguments give nil. Throws what `JSON.stringify` throws (cycles, BigInt).
    public func json(_ i: Int) throws(JSError) -> [UInt8]? {
        guard let v = value(i) else { return nil }
        return try JSEngine.jsonText(context, v)
    }

    /// The argument converted with `String(x)`.
    public func string(_ i: Int) -> String {
        guard let v = value(i) else { return "undefined" }
        return JSEngine.stringValue(context, v) ?? ""
    }

    /// The argument as a number, nil when it is not a number.
    public func number(_ i: Int) -> Double? {
        guard let v = value(i), JSValueIsNumber(context, v) else { return nil }
        return JSValueToNumber(context, v, nil)
    }
}

/// A native function callable from scripts by name. Throwing `JSError.native(m)` raises
/// `new Error(m)` in the script.
public typealias JSNativeFunction = (JSCallArguments) throws(JSError) -> Void

/// One JavaScriptCore context: compile functions once, call them many times with JSON-ish arguments,
/// expose native functions (`emit`, `channel`, ...) by name.
///
/// Invariants:
/// 1. Owned by one thread: created there, used only there (checked on every call). Create one per
///    worker thread; never share (JSC contexts are not safe to use from two threads at once, and the
///    views and gateway code keep the whole call path on one thread anyway).
/// 2. Every call is bounded by `timeLimitSeconds` through JSC's watchdog
///    (`JSContextGroupSetExecutionTimeLimit`, exported by the GTK build but declared in a private
///    header, re-declared in CJavaScriptCore/shim.h). A stopped call throws `.timeout`; the context
///    stays usable. JSC runs with polling traps (`JSC_usePollingTraps`, see `JSCOptions`): without them a
///    runaway loop in JIT code is stopped by signals from JSC's "Signal Sender" thread, and on a loaded
///    2-core machine that missed for minutes or for good (a CI run hung; 2 of 8 runs of the runaway tests
///    under two busy loops, 0 of 8 with polling traps).
/// 3. Compiled functions are protected from GC until the engine is deinitialised.
public final class JSEngine {
    private let group: JSContextGroupRef
    private let context: JSGlobalContextRef
    private let owner: pthread_t
    private var protected: [JSValueRef] = []
    private var natives: [Unmanaged<NativeBox>] = []
    /// Reused to NUL-terminate the elements of a `.strings` argument.
    private var scratch: [UInt8] = []
    private let watchdog: Unmanaged<WatchdogState>
    private let nativeClass: JSClassRef
    /// CPU seconds one call may run.
    public let timeLimitSeconds: Double
    /// Bytes of heap one call may hold.
    public let heapLimitBytes: Int

    /// Creates a context with the given per-call time and heap limits.
    public init(
        timeLimitSeconds: Double = Limits.jsCallTimeLimitSeconds, heapLimitBytes: Int = Limits.jsHeapMaxBytes
    ) {
        precondition(timeLimitSeconds > 0, "time limit must be positive, got \(timeLimitSeconds)")
        self.timeLimitSeconds = timeLimitSeconds
        self.heapLimitBytes = heapLimitBytes
        JSCOptions.configured()
        owner = pthread_self()
        group = JSContextGroupCreate()
        context = JSGlobalContextCreateInGroup(group, nil)
        watchdog = Unmanaged.passRetained(
            WatchdogState(group: group, timeLimit: timeLimitSeconds, heapLimit: heapLimitBytes))
        watchdog.takeUnretainedValue().arm()
        var definition = kJSClassDefinitionEmpty
        definition.callAsFunction = { ctx, function, _, argc, argv, exception in
            guard let ctx, let function, let raw = JSObjectGetPrivate(function) else {
                return JSValueMakeUndefined(ctx)
            }
            let box = Unmanaged<NativeBox>.fromOpaque(raw).takeUnretainedValue()
            let args = JSCallArguments(context: ctx, values: argv, count: argc)
            do throws(JSError) {
                try box.body(args)
            } catch {
                exception?.pointee = JSEngine.makeError(ctx, error.description)
            }
            return JSValueMakeUndefined(ctx)
        }
        nativeClass = JSClassCreate(&definition)
    }

    deinit {
        checkThread()
        for v in protected { JSValueUnprotect(context, v) }
        JSGlobalContextRelease(context)
        JSContextGroupRelease(group)
        JSClassRelease(nativeClass)
        for n in natives { n.release() }
        watchdog.release()
    }

    private func checkThread() {
        precondition(pthread_equal(owner, pthread_self()) != 0, "JSEngine used from a thread other than its owner")
    }

    /// Defines a global function `name` that runs `body`. Re-registering a name replaces it.
    public func register(name: String, _ body: @escaping JSNativeFunction) {
        checkThread()
        let box = Unmanaged.passRetained(NativeBox(body))
        natives.append(box)
        let object = JSObjectMake(context, nativeClass, box.toOpaque())
        let global = JSContextGetGlobalObject(context)
        let jsName = JSStringCreateWithUTF8CString(name)
        defer { JSStringRelease(jsName) }
        JSObjectSetProperty(context, global, jsName, object, JSPropertyAttributes(kJSPropertyAttributeNone), nil)
    }

    /// Evaluates `source` (top-level code, e.g. helper definitions) for its side effects.
    public func evaluate(_ source: String) throws(JSError) {
        checkThread()
        _ = try evaluateValue(source)
    }

    /// Compiles `source`, which must be a function expression (`function(doc, meta) {...}`).
    public func compileFunction(_ source: String) throws(JSError) -> JSFunction {
        checkThread()
        // Parenthesised so a function declaration evaluates to the function (CouchDB does the same).
        let value = try evaluateValue("(" + source + "\n)")
        guard JSValueIsObject(context, value), let object = JSValueToObject(context, value, nil),
            JSObjectIsFunction(context, object)
        else { throw .notAFunction }
        JSValueProtect(context, object)
        protected.append(object)
        return JSFunction(object: object, engineID: ObjectIdentifier(self))
    }

    /// Calls `function` with `arguments`; returns the result as compact JSON, or nil when it is
    /// `undefined` (or not representable in JSON, like a function).
    @discardableResult
    public func call(_ function: JSFunction, _ arguments: [JSArgument]) throws(JSError) -> [UInt8]? {
        guard let result = try invoke(function, arguments) else { return nil }
        return try Self.jsonText(context, result)
    }

    /// Calls `function` with `arguments`; returns its result converted with `String(x)`, as UTF-8 (a script
    /// that builds its answer as one string hands it back in one conversion, with no JSON quoting).
    public func callForText(_ function: JSFunction, _ arguments: [JSArgument]) throws(JSError) -> [UInt8] {
        guard let result = try invoke(function, arguments), let s = JSValueToStringCopy(context, result, nil) else {
            throw .exception("the result did not convert to a string")
        }
        defer { JSStringRelease(s) }
        return Self.bytes(of: s)
    }

    private func invoke(_ function: JSFunction, _ arguments: [JSArgument]) throws(JSError) -> JSValueRef? {
        checkThread()
        precondition(function.engineID == ObjectIdentifier(self), "JSFunction called on another engine")
        // The argument values live in a Swift array (heap memory, which JSC's conservative stack scan does
        // not see): protected until the call returns, or a collection while the next one is made frees them.
        var values: [JSValueRef?] = []
        values.reserveCapacity(arguments.count)
        defer { for case let v? in values { JSValueUnprotect(context, v) } }
        for a in arguments {
            let v = try makeValue(a)
            if let v { JSValueProtect(context, v) }
            values.append(v)
        }
        var exception: JSValueRef?
        watchdog.takeUnretainedValue().start()
        let result = values.withUnsafeBufferPointer { buf in
            JSObjectCallAsFunction(context, function.object, nil, buf.count, buf.baseAddress, &exception)
        }
        if let exception { throw classify(exception) }
        return result
    }

    // MARK: Helpers

    private func evaluateValue(_ source: String) throws(JSError) -> JSValueRef {
        let script = JSStringCreateWithUTF8CString(source)
        defer { JSStringRelease(script) }
        var exception: JSValueRef?
        guard JSCheckScriptSyntax(context, script, nil, 1, &exception) else {
            throw .compile(exception.flatMap { Self.stringValue(context, $0) } ?? "syntax error")
        }
        exception = nil
        watchdog.takeUnretainedValue().start()
        let value = JSEvaluateScript(context, script, nil, nil, 1, &exception)
        if let exception { throw classify(exception) }
        guard let value else { throw .exception("evaluation returned nothing") }
        return value
    }

    private func classify(_ exception: JSValueRef) -> JSError {
        switch watchdog.takeUnretainedValue().stopped {
        case .time?: return .timeout
        case .memory?:
            // What the stopped call made is garbage now: collected before the next call counts its heap.
            JSSynchronousGarbageCollectForDebugging(context)
            return .outOfMemory
        case nil: return .exception(Self.stringValue(context, exception) ?? "exception")
        }
    }

    private func makeValue(_ argument: JSArgument) throws(JSError) -> JSValueRef? {
        switch argument {
        case .json(let bytes):
            let s = Self.makeString(bytes)
            defer { JSStringRelease(s) }
            guard let v = JSValueMakeFromJSONString(context, s) else { throw .invalidJSON }
            return v
        case .string(let text):
            let s = JSStringCreateWithUTF8CString(text)
            defer { JSStringRelease(s) }
            return JSValueMakeString(context, s)
        case .strings(let texts):
            return try makeArray(count: texts.count) { i in
                texts[i].withUnsafeBufferPointer { bytes in
                    // A copy with a NUL after it, in one buffer reused for every element.
                    scratch.removeAll(keepingCapacity: true)
                    scratch.append(contentsOf: bytes)
                    scratch.append(0)
                    let s = scratch.withUnsafeBufferPointer { buf in
                        buf.withMemoryRebound(to: CChar.self) { JSStringCreateWithUTF8CString($0.baseAddress) }
                    }
                    defer { JSStringRelease(s) }
                    return JSValueMakeString(context, s)
                }
            }
        case .functions(let functions):
            for f in functions {
                precondition(f.engineID == ObjectIdentifier(self), "JSFunction passed to another engine")
            }
            return try makeArray(count: functions.count) { i in functions[i].object }
        case .number(let d): return JSValueMakeNumber(context, d)
        case .bool(let b): return JSValueMakeBoolean(context, b)
        case .null: return JSValueMakeNull(context)
        case .undefined: return JSValueMakeUndefined(context)
        }
    }

    /// A new array of `count` elements made by `element`; the array is protected while it fills (each new
    /// element is reachable from it at once, so a collection between two elements frees nothing).
    private func makeArray(count: Int, _ element: (Int) -> JSValueRef?) throws(JSError) -> JSValueRef? {
        var exception: JSValueRef?
        guard let array = JSObjectMakeArray(context, 0, nil, &exception), exception == nil else {
            throw .exception("could not make an array")
        }
        JSValueProtect(context, array)
        defer { JSValueUnprotect(context, array) }
        for i in 0..<count {
            JSObjectSetPropertyAtIndex(context, array, UInt32(truncatingIfNeeded: i), element(i), &exception)
            if exception != nil { throw .exception("could not fill an array") }
        }
        return array
    }

    /// A JSString from UTF-8 bytes (JSON never contains a raw NUL, so the C-string API is exact).
    static func makeString(_ bytes: [UInt8]) -> JSStringRef {
        var copy = bytes
        copy.append(0)
        return copy.withUnsafeBufferPointer { buf in
            buf.withMemoryRebound(to: CChar.self) { JSStringCreateWithUTF8CString($0.baseAddress) }
        }
    }

    static func bytes(of string: JSStringRef) -> [UInt8] {
        let max = JSStringGetMaximumUTF8CStringSize(string)
        return [UInt8](unsafeUninitializedCapacity: max) { buf, count in
            let written = buf.withMemoryRebound(to: CChar.self) { JSStringGetUTF8CString(string, $0.baseAddress, max) }
            count = written > 0 ? written - 1 : 0  // minus the NUL
        }
    }

    static func jsonText(_ context: JSContextRef, _ value: JSValueRef) throws(JSError) -> [UInt8]? {
        if JSValueIsUndefined(context, value) { return nil }
        var exception: JSValueRef?
        let s = JSValueCreateJSONString(context, value, 0, &exception)
        if let exception { throw .exception(stringValue(context, exception) ?? "JSON.stringify failed") }
        guard let s else { return nil }
        defer { JSStringRelease(s) }
        return bytes(of: s)
    }

    static func stringValue(_ context: JSContextRef, _ value: JSValueRef) -> String? {
        guard let s = JSValueToStringCopy(context, value, nil) else { return nil }
        defer { JSStringRelease(s) }
        return String(decoding: bytes(of: s), as: UTF8.self)
    }

    static func makeError(_ context: JSContextRef, _ message: String) -> JSValueRef? {
        let s = JSStringCreateWithUTF8CString(message)
        defer { JSStringRelease(s) }
        var arg: JSValueRef? = JSValueMakeString(context, s)
        return JSObjectMakeError(context, 1, &arg, nil)
    }
}

private final class NativeBox {
    let body: JSNativeFunction
    init(_ body: @escaping JSNativeFunction) { self.body = body }
}

/// JSC reads its options from `JSC_*` environment variables once, when the first VM is made; this sets ours
/// before that (once per process, without overriding a value the operator set).
private enum JSCOptions {
    private static let applied: Bool = {
        // Loop back-edges check for a pending watchdog trap instead of waiting for a signal to land.
        setenv("JSC_usePollingTraps", "true", 0)
        return true
    }()

    static func configured() { _ = applied }
}

/// What the watchdog's callback knows of the running call (used on the engine's thread only: JSC calls the callback
/// from the running script).
///
/// The watchdog fires after each check interval of a call's CPU time: the callback stops the call once it ran the time
/// limit or holds more heap than allowed, and otherwise arms the watchdog again (this JSC does not re-arm it when
/// the callback answers false: a runaway loop then ran for ever).
private final class WatchdogState {
    enum Stop { case time, memory }
    let group: JSContextGroupRef
    let timeLimit: Double
    let heapLimit: Int
    /// Why the last call was stopped, if it was.
    var stopped: Stop?
    /// The thread's CPU seconds when the call began.
    private var began = 0.0
    private let heapSizeName = JSStringCreateWithUTF8CString("heapSize")

    init(group: JSContextGroupRef, timeLimit: Double, heapLimit: Int) {
        self.group = group
        self.timeLimit = timeLimit
        self.heapLimit = heapLimit
    }

    /// (Re)starts the watchdog's interval; JSC allows this from inside the callback.
    func arm() {
        JSContextGroupSetExecutionTimeLimit(
            group, min(timeLimit, Limits.jsHeapCheckSeconds),
            { ctx, info in
                guard let info else { return true }
                return Unmanaged<WatchdogState>.fromOpaque(info).takeUnretainedValue().shouldStop(ctx)
            }, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { JSStringRelease(heapSizeName) }

    func start() {
        stopped = nil
        began = Self.threadCPUSeconds()
    }

    /// Called by JSC's watchdog after each check interval of a call's CPU time: true stops the call.
    func shouldStop(_ ctx: JSContextRef?) -> Bool {
        if Self.threadCPUSeconds() - began >= timeLimit {
            stopped = .time
            return true
        }
        // Over the limit by JSC's count, which may still include garbage its collector has not reached (a loaded
        // machine delays it): collect, and stop only if the call still holds too much.
        if let ctx, heapBytes(ctx) > Double(heapLimit) {
            JSSynchronousGarbageCollectForDebugging(ctx)
            if heapBytes(ctx) > Double(heapLimit) {
                stopped = .memory
                return true
            }
        }
        arm()
        return false
    }

    /// JSC's count of the heap: live objects as of its last collection, plus the memory their strings and buffers
    /// hold.
    private func heapBytes(_ ctx: JSContextRef) -> Double {
        guard let stats = JSGetMemoryUsageStatistics(ctx) else { return 0 }
        let size = JSValueToNumber(ctx, JSObjectGetProperty(ctx, stats, heapSizeName, nil), nil)
        return size.isFinite ? size : 0
    }

    private static func threadCPUSeconds() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}
