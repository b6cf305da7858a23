import SetteeJS
import Testing

@Suite struct JSEngineTests {
    // Proves a compiled function runs with JSON arguments and its result comes back as JSON.
    @Test func callWithJSONArguments() throws {
        let js = JSEngine()
        let f = try js.compileFunction("function(doc, meta){ return {n: doc.a + 1, id: meta.id}; }")
        let out = try js.call(f, [.json(Array(#"{"a":41}"#.utf8)), .json(Array(#"{"id":"k"}"#.utf8))])
        #expect(out.map { String(decoding: $0, as: UTF8.self) } == #"{"n":42,"id":"k"}"#)
    }

    // Proves native functions registered by name receive the script's arguments as JSON, in order.
    @Test func nativeEmit() throws {
        let js = JSEngine()
        nonisolated(unsafe) var emitted: [String] = []
        js.register(name: "emit") { args throws(JSError) in
            let k = try args.json(0).map { String(decoding: $0, as: UTF8.self) } ?? "undefined"
            let v = try args.json(1).map { String(decoding: $0, as: UTF8.self) } ?? "undefined"
            emitted.append(k + "=" + v)
        }
        let f = try js.compileFunction("function(doc){ emit([doc.x, 'a'], null); emit(doc.x); }")
        try js.call(f, [.json(Array(#"{"x":1.5}"#.utf8))])
        #expect(emitted == [#"[1.5,"a"]=null"#, "1.5=undefined"])
    }

    // Proves an exception thrown by the script surfaces as a typed error carrying its message.
    @Test func exceptionIsTyped() throws {
        let js = JSEngine()
        let f = try js.compileFunction("function(doc){ return doc.missing.field; }")
        #expect(throws: JSError.self) { try js.call(f, [.json(Array("{}".utf8))]) }
        do {
            try js.call(f, [.json(Array("{}".utf8))])
            Issue.record("expected a throw")
        } catch {
            guard case .exception(let m) = error else { Issue.record("wrong error \(error)"); return }
            #expect(m.contains("TypeError"))
        }
    }

    // Proves a syntax error is reported at compile time and a non-function source is refused.
    @Test func compileErrors() {
        let js = JSEngine()
        #expect(throws: JSError.self) { try js.compileFunction("function(doc){ emit(") }
        #expect(throws: JSError.notAFunction) { try js.compileFunction("42") }
    }

    // Proves a runaway script is stopped by the watchdog, reported as .timeout, and the engine
    // stays usable for the next call.
    @Test func runawayScriptIsStopped() throws {
        let js = JSEngine(timeLimitSeconds: 0.2)
        let spin = try js.compileFunction("function(){ while(true){} }")
        let start = ContinuousClock.now
        #expect(throws: JSError.timeout) { try js.call(spin, []) }
        #expect(ContinuousClock.now - start < .seconds(5))
        let ok = try js.compileFunction("function(a){ return a * 2; }")
        #expect(try js.call(ok, [.number(21)]) == Array("42".utf8))
    }

    /// Proves a call that holds more heap than the engine allows is stopped, reported as `.outOfMemory` (not as the
    /// script's exception or a timeout), and the engine stays usable, its garbage collected, for calls that hold less;
    /// a call that makes much garbage but holds little runs to its end. Before, only time was bounded: a map, reduce
    /// or sync function could hold gigabytes for its 5 s (JavaScriptCore has no heap limit of its own).
    @Test func aCallHoldingTooMuchHeapIsStopped() throws {
        let js = JSEngine(timeLimitSeconds: 30, heapLimitBytes: 64 << 20)
        let hoard = try js.compileFunction(
            "function(){ var a = []; for (var i = 0; i < 1e8; i++) { a.push({i: i, s: 'x' + i}); } return a.length; }")
        let strings = try js.compileFunction(
            "function(){ var a = []; for (var i = 0; i < 1e6; i++) { a.push('y'.repeat(1000) + i); } return a.length; }"
        )
        let churn = try js.compileFunction(
            "function(n){ var t = 0; for (var i = 0; i < n; i++) { var o = {s: 'z'.repeat(100) + i}; t += o.s.length; }"
                + " return t > 0; }")
        let ok = try js.compileFunction("function(a){ return a * 2; }")
        let start = ContinuousClock.now
        #expect(throws: JSError.outOfMemory) { try js.call(hoard, []) }
        #expect(throws: JSError.outOfMemory) { try js.call(strings, []) }
        #expect(ContinuousClock.now - start < .seconds(25))
        #expect(try js.call(ok, [.number(21)]) == Array("42".utf8))
        #expect(try js.call(churn, [.number(3_000_000)]) == Array("true".utf8))
        #expect(throws: JSError.outOfMemory) { try js.call(hoard, []) }
    }

    // Proves a native function's thrown error becomes a catchable JS exception.
    @Test func nativeThrowBecomesJSException() throws {
        let js = JSEngine()
        js.register(name: "fail") { _ throws(JSError) in throw .native("nope") }
        let f = try js.compileFunction("function(){ try { fail(); } catch (e) { return e.message; } }")
        #expect(try js.call(f, []) == Array(#""nope""#.utf8))
    }

    // Proves an undefined result maps to nil and invalid JSON arguments are rejected.
    @Test func undefinedAndInvalidJSON() throws {
        let js = JSEngine()
        let f = try js.compileFunction("function(x){ }")
        #expect(try js.call(f, [.null]) == nil)
        #expect(throws: JSError.invalidJSON) { try js.call(f, [.json(Array("{bad".utf8))]) }
    }
}
