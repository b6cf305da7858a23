/// What exactly a peer's bytes broke (BLIP Protocol 3.0, §3.8), as `BLIPConnection` and the codec report it. The
/// session ends the connection with `closeCode` and hands its handlers and waiting senders
/// `BLIPConnectionError.protocolError(description)`.
public enum BLIPProtocolViolation: Error, Sendable, Equatable, CustomStringConvertible {
    /// A WebSocket message with no bytes.
    case emptyFrame
    /// A frame longer than `Limits.blipMaxFrameBytes` (bytes, limit).
    case frameTooLarge(Int, limit: Int)
    /// A varint (message number, flags, properties length, ACK count) that is truncated or longer than 64 bits.
    case badVarint(field: String, BLIPVarint.DecodeError)
    /// A data frame shorter than its 4-byte checksum.
    case missingChecksum
    /// The frame's checksum is not the running CRC-32 of the data received in this direction (§3.5).
    case checksumMismatch(expected: UInt32, received: UInt32)
    /// The deflate stream of compressed frames is corrupt or ended (§3.6).
    case badDeflateData(String)
    /// One compressed frame inflated past `Limits.blipMaxInflatedFrameBytes`.
    case inflatedFrameTooLarge(limit: Int)
    /// A request frame whose number is neither an unfinished request nor the next one (§3.3).
    case unexpectedRequestNumber(UInt64, next: UInt64)
    /// A response frame for a request number this side never sent.
    case unexpectedResponseNumber(UInt64)
    /// A properties length above `Limits.blipMaxPropertiesBytes`.
    case propertiesTooLarge(UInt64, limit: Int)
    /// A property block that is not NUL-terminated UTF-8 name/value pairs, or a message ending inside it (§3.4).
    case badProperties(String)
    /// A message whose properties and body pass `Limits.blipMaxIncomingMessageBytes`.
    case messageTooLarge(limit: Int)
    /// More than `Limits.blipMaxIncompleteIncomingMessages` messages begun and not finished.
    case tooManyIncompleteMessages(limit: Int)
    /// Incomplete incoming messages holding more than `Limits.blipMaxIncompleteIncomingBytes` together.
    case incompleteBytesExceeded(limit: Int)
    /// More than `Limits.blipMaxWaitingRequests` complete requests waiting for a handler.
    case tooManyWaitingRequests(limit: Int)
    /// This side was asked to send something BLIP cannot carry (a NUL inside a property, an ACK type); never a
    /// peer's doing.
    case cannotSend(String)

    /// The WebSocket close code the connection should end with (RFC 6455 §7.4.1): 1009 for sizes past a bound,
    /// 1008 (policy) for a peer too far ahead of this side, 1002 for everything else.
    public var closeCode: UInt16 {
        switch self {
        case .frameTooLarge, .inflatedFrameTooLarge, .propertiesTooLarge, .messageTooLarge, .incompleteBytesExceeded:
            return 1009
        case .tooManyIncompleteMessages, .tooManyWaitingRequests:
            return 1008
        default:
            return 1002
        }
    }

    public var description: String {
        switch self {
        case .emptyFrame: return "empty BLIP frame"
        case .frameTooLarge(let n, let limit): return "BLIP frame of \(n) bytes is over the \(limit)-byte limit"
        case .badVarint(let field, let e):
            return "bad varint in BLIP \(field): \(e == .truncated ? "truncated" : "longer than 64 bits")"
        case .missingChecksum: return "BLIP frame ends before its checksum"
        case .checksumMismatch(let expected, let received):
            return "BLIP frame checksum \(hex(received)) is not the running CRC-32 \(hex(expected))"
        case .badDeflateData(let why): return "bad deflate data in a compressed BLIP frame: \(why)"
        case .inflatedFrameTooLarge(let limit): return "a compressed BLIP frame inflates past \(limit) bytes"
        case .unexpectedRequestNumber(let n, let next): return "BLIP request #\(n) is out of order (next is #\(next))"
        case .unexpectedResponseNumber(let n): return "BLIP response #\(n) answers no request sent"
        case .propertiesTooLarge(let n, let limit):
            return "BLIP properties of \(n) bytes are over the \(limit)-byte limit"
        case .badProperties(let why): return "bad BLIP properties: \(why)"
        case .messageTooLarge(let limit): return "BLIP message is over the \(limit)-byte limit"
        case .tooManyIncompleteMessages(let limit): return "more than \(limit) incomplete BLIP messages"
        case .incompleteBytesExceeded(let limit): return "incomplete BLIP messages hold more than \(limit) bytes"
        case .tooManyWaitingRequests(let limit): return "more than \(limit) BLIP requests wait for a handler"
        case .cannotSend(let why): return "cannot send a BLIP message: \(why)"
        }
    }

    /// The error handlers and senders see.
    public var connectionError: BLIPConnectionError { .protocolError(description) }

    private func hex(_ v: UInt32) -> String {
        let s = String(v, radix: 16)
        return "0x" + String(repeating: "0", count: max(0, 8 - s.count)) + s
    }
}
