import NIOCore

/// The kinds of operation a run issues.
public enum OpKind: Int, Sendable, Codable, CaseIterable {
    case get = 0
    case set = 1
    public var name: String { self == .get ? "get" : "set" }
}

/// How the server answered one request.
public enum ResponseOutcome: Equatable {
    case ok
    /// GET of an absent key (memcached KEY_ENOENT, RESP null bulk string).
    case miss
    /// Anything else the server said; the text names the kind (e.g. a status code).
    case error(String)
    /// The server refused for now (memcached-binary ETMPFAIL, ENOMEM): the preload sends it again
    /// (`TemporaryFailureRetry`); a measured phase counts it as an error.
    case temporary(String)
}

/// One decoded response. `opaque` is nil for protocols without request ids (RESP answers in order).
public struct DecodedResponse {
    public var opaque: UInt32?
    public var outcome: ResponseOutcome
}

/// The stream does not follow the protocol; the connection cannot continue.
public struct ProtocolViolation: Error, CustomStringConvertible {
    public var description: String
}

/// A wire protocol as the load generator needs it: encode GET/SET of key number `i` and decode
/// responses. One instance per connection; `Shared` holds tables built once per run.
public protocol LoadCodec: SendableMetatype {
    associatedtype Shared: Sendable
    static func prepare(_ keySpace: KeySpace) -> Shared
    init(shared: Shared)
    func writeGet(key: Int, opaque: UInt32, into buffer: inout ByteBuffer)
    func writeSet(key: Int, opaque: UInt32, into buffer: inout ByteBuffer)
    /// Decodes one response, consuming it; nil (consuming nothing) while it is incomplete.
    mutating func decode(_ buffer: inout ByteBuffer) throws(ProtocolViolation) -> DecodedResponse?
}
