import SetteeCore

/// One complete BLIP message: a request, a response or an error, with its properties and body, as the
/// BLIP protocol 3.0 defines it (couchbase-lite-core, `Networking/BLIP/docs/BLIP Protocol.md`, §Messages).
///
/// A message travels as one or more frames (`BLIPConnection` splits and joins them); this value is the
/// whole, reassembled message. Numbers are per direction: requests a peer sends are numbered 1, 2, 3 ...
/// by the sender, and a response carries the number of the request it answers.
public struct BLIPMessage: Sendable, Equatable {
    /// The low three bits of the frame flags (§Frames): requests, responses, errors; ACKs are internal to
    /// the connection (flow control) and never reach a handler.
    public enum MessageType: UInt8, Sendable {
        case request = 0
        case response = 1
        case error = 2
        case ackRequest = 4
        case ackResponse = 5
    }

    /// The message number: the sender's request counter (requests) or the request's number (responses, errors).
    public var number: UInt64
    public var type: MessageType
    /// Sent ahead of normal messages when frames are interleaved (§Multiplexing).
    public var urgent: Bool
    /// A request that wants no response (§Requests). Meaningless on a response.
    public var noReply: Bool
    /// Send this message's frames through the connection's deflate context (§Compression). Set on
    /// messages received when their first frame was compressed.
    public var compressed: Bool
    /// Properties in wire order (names and values are UTF-8 strings, no NULs). `Profile` names a request's kind.
    public var properties: [(name: String, value: String)]
    /// The body bytes (JSON for every replication message that has one; raw bytes for attachments).
    public var body: [UInt8]

    public init(
        number: UInt64 = 0, type: MessageType = .request, urgent: Bool = false, noReply: Bool = false,
        compressed: Bool = false, properties: [(name: String, value: String)] = [], body: [UInt8] = []
    ) {
        self.number = number
        self.type = type
        self.urgent = urgent
        self.noReply = noReply
        self.compressed = compressed
        self.properties = properties
        self.body = body
    }

    /// The first value of property `name`, or nil.
    public subscript(name: String) -> String? {
        properties.first { $0.name == name }?.value
    }

    /// `Profile`: the kind of a request (`getCheckpoint`, `subChanges`, `rev`, ...; replication-protocol.adoc).
    public var profile: String? { self["Profile"] }

    /// An error response to request `number` (§Errors): properties `Error-Domain` (`BLIP` for protocol errors,
    /// `HTTP` for replication answers such as 404, 409) and `Error-Code`, the body an optional message text.
    public static func error(
        answering number: UInt64, domain: String = "HTTP", code: Int, message: String = ""
    ) -> BLIPMessage {
        BLIPMessage(
            number: number, type: .error,
            properties: [(name: "Error-Domain", value: domain), (name: "Error-Code", value: String(code))],
            body: Array(message.utf8))
    }

    public static func == (a: BLIPMessage, b: BLIPMessage) -> Bool {
        a.number == b.number && a.type == b.type && a.urgent == b.urgent && a.noReply == b.noReply
            && a.compressed == b.compressed && a.body == b.body && a.properties.count == b.properties.count
            && zip(a.properties, b.properties).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }
}

/// The side of a BLIP connection a message handler talks to: sends requests to the other peer and waits for
/// their answers. The connection shell implements it over a WebSocket; tests implement it in memory.
public protocol BLIPPeer: Sendable {
    /// Sends `request` (its `number` is assigned by the connection) and returns the complete response or
    /// error message; returns nil at once for a `noReply` request.
    /// - Throws: `BLIPConnectionError` when the connection closes before the answer arrives.
    func send(_ request: BLIPMessage) async throws -> BLIPMessage?
}

/// Answers the requests a peer sends. The shell calls `handle` once per complete incoming request,
/// possibly concurrently (at most `Limits.blipMaxConcurrentRequests` at a time), and sends what it returns
/// as the response (its `number` set to the request's); for a `noReply` request the answer is dropped.
public protocol BLIPRequestHandler: Sendable {
    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage

    /// Called once `handle`'s answer to `request` is queued on the connection (for a `noReply` request, once
    /// `handle` returned): work that must reach the peer after that answer starts here. Sync Gateway's
    /// `subChanges` is the case: its first `changes` request must not overtake the empty `subChanges` response
    /// (clients such as pythonblip wait for the response before they serve `changes`). Default: nothing.
    func responded(to request: BLIPMessage, peer: any BLIPPeer) async
}

extension BLIPRequestHandler {
    public func responded(to request: BLIPMessage, peer: any BLIPPeer) async {}
}

/// Why a BLIP connection ended or a message could not be exchanged.
public enum BLIPConnectionError: Error, Sendable, Equatable {
    /// The connection closed (by either side) before the answer came.
    case closed
    /// The peer broke the protocol (bad frame, varint, checksum, property block, bound exceeded): the connection
    /// closes with a WebSocket close code 1002 (protocol error) or 1009 (too big) and this text as the reason.
    case protocolError(String)
}
