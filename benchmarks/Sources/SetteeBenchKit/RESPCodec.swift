import NIOCore

/// The few bytes of RESP2 a GET/SET load needs, hand-written on `ByteBuffer`.
///
/// Requests are arrays of bulk strings (`*3\r\n$3\r\nSET\r\n$<n>\r\n<key>\r\n$<n>\r\n<value>\r\n`); each key's
/// `$<n>\r\n<key>\r\n` and the value's bulk string are encoded once per run. Replies arrive in request
/// order (RESP has no request ids): `+OK`, `$<n>\r\n<bytes>\r\n`, `$-1` (absent key), `-ERR ...`, `:<n>`.
public struct RESPCodec: LoadCodec {
    public final class Tables: Sendable {
        let bulkKeys: [[UInt8]]
        let bulkValue: [UInt8]
        init(_ keySpace: KeySpace) {
            bulkKeys = keySpace.keys.map { RESPCodec.bulk($0) }
            bulkValue = RESPCodec.bulk(keySpace.value)
        }
    }

    static let getPrefix = Array("*2\r\n$3\r\nGET\r\n".utf8)
    static let setPrefix = Array("*3\r\n$3\r\nSET\r\n".utf8)
    /// Longest simple-string/error/length line accepted before the stream is declared corrupt.
    static let maxLineLength = 4096

    let tables: Tables

    public static func prepare(_ keySpace: KeySpace) -> Tables { Tables(keySpace) }
    public init(shared: Tables) { self.tables = shared }

    static func bulk(_ bytes: [UInt8]) -> [UInt8] {
        Array("$\(bytes.count)\r\n".utf8) + bytes + [13, 10]
    }

    public func writeGet(key: Int, opaque: UInt32, into buffer: inout ByteBuffer) {
        buffer.writeBytes(Self.getPrefix)
        buffer.writeBytes(tables.bulkKeys[key])
    }

    public func writeSet(key: Int, opaque: UInt32, into buffer: inout ByteBuffer) {
        buffer.writeBytes(Self.setPrefix)
        buffer.writeBytes(tables.bulkKeys[key])
        buffer.writeBytes(tables.bulkValue)
    }

    public mutating func decode(_ buffer: inout ByteBuffer) throws(ProtocolViolation) -> DecodedResponse? {
        let view = buffer.readableBytesView
        guard let type = view.first else { return nil }
        guard let lf = view.firstIndex(of: 10) else {
            if view.count > Self.maxLineLength { throw ProtocolViolation(description: "RESP: line too long") }
            return nil
        }
        let lineStart = view.startIndex + 1
        let lineEnd = lf - 1  // before "\r"
        guard lineEnd >= lineStart, view[lineEnd] == 13 else {
            throw ProtocolViolation(description: "RESP: line not terminated by CRLF")
        }
        let lineLength = lf + 1 - view.startIndex
        switch type {
        case UInt8(ascii: "+"), UInt8(ascii: ":"):
            buffer.moveReaderIndex(forwardBy: lineLength)
            return DecodedResponse(opaque: nil, outcome: .ok)
        case UInt8(ascii: "-"):
            // The error's first word is its kind (ERR, WRONGTYPE, OOM, ...).
            let text = String(decoding: view[lineStart..<lineEnd], as: UTF8.self)
            buffer.moveReaderIndex(forwardBy: lineLength)
            return DecodedResponse(
                opaque: nil, outcome: .error("RESP -" + (text.split(separator: " ").first.map(String.init) ?? "")))
        case UInt8(ascii: "$"):
            guard let n = Self.parseInt(view[lineStart..<lineEnd]) else {
                throw ProtocolViolation(description: "RESP: bad bulk length")
            }
            if n < 0 {
                buffer.moveReaderIndex(forwardBy: lineLength)
                return DecodedResponse(opaque: nil, outcome: .miss)
            }
            guard view.count >= lineLength + n + 2 else { return nil }
            buffer.moveReaderIndex(forwardBy: lineLength + n + 2)
            return DecodedResponse(opaque: nil, outcome: .ok)
        default:
            throw ProtocolViolation(description: "RESP: unexpected reply type 0x\(String(type, radix: 16))")
        }
    }

    static func parseInt(_ digits: ByteBufferView.SubSequence) -> Int? {
        var value = 0
        var negative = false
        var any = false
        for (i, byte) in digits.enumerated() {
            if i == 0 && byte == UInt8(ascii: "-") {
                negative = true
                continue
            }
            guard byte >= 48 && byte <= 57, value < Int.max / 10 - 10 else { return nil }
            value = value * 10 + Int(byte - 48)
            any = true
        }
        return any ? (negative ? -value : value) : nil
    }
}
