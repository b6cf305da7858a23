/// Why a JavaScript operation failed. Operating errors (user code), so they are thrown.
public enum JSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The source did not compile (syntax error), with JSC's message.
    case compile(String)
    /// The source compiled but did not evaluate to a function.
    case notAFunction
    /// The function threw; the message is the exception converted to a string (`String(e)`).
    case exception(String)
    /// The call ran longer than the engine's time limit and was stopped by JSC's watchdog.
    case timeout
    /// The call's heap passed the engine's bound (`Limits.jsHeapMaxBytes`) and it was stopped; the context stays
    /// usable (its garbage is collected before the next call).
    case outOfMemory
    /// An argument given as JSON text did not parse.
    case invalidJSON
    /// A native function rejected its arguments (surfaced to the script as a thrown `Error`).
    case native(String)

    public var description: String {
        switch self {
        case .compile(let m): return "compile error: \(m)"
        case .notAFunction: return "source is not a function"
        case .exception(let m): return m
        case .timeout: return "timeout"
        case .outOfMemory: return "out of memory: the JavaScript heap passed its limit"
        case .invalidJSON: return "invalid JSON argument"
        case .native(let m): return m
        }
    }
}
