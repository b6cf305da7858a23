import SetteeCore

/// One side of a BLIP 3 connection as a pure state machine (BLIP Protocol 3.0, couchbase-lite-core
/// `Networking/BLIP/docs/BLIP Protocol.md`): frames in, complete messages out; messages in, frames out. No I/O, no
/// tasks, no clock: `BLIPSession` (or a test) carries frames between it and a WebSocket.
///
/// Events and what they return:
/// - `receive(frame:)`: one binary WebSocket message → the messages it completed (requests, responses, errors);
///   it may also queue ACKs, which `nextFrame()` hands out first.
/// - `enqueue(_:)`: a request (numbered here) or a response (numbered as its request) joins the out-box.
/// - `nextFrame()`: the next frame to write, or nil when nothing may be sent now (empty, or every message with
///   data left is waiting for an ACK).
///
/// States of an outgoing message: queued in `outbox` (round robin, urgent ones ahead, §3.2) → framed piece by piece
/// → `icebox` while `maxUnackedBytes` of it are unacknowledged (§3.7) → back to `outbox` on an ACK → gone after its
/// last frame. An incoming message: pending (its frames so far, inflated) → complete (returned) → gone.
///
/// Invariants:
/// 1. Requests this side sends are numbered 1, 2, 3 … in `enqueue` order and begun in that order: a new urgent
///    message is never put ahead of a message whose first frame has not gone (§3.2).
/// 2. Every data frame sent, compressed or not, adds its uncompressed data to `outputCRC`, and every data frame
///    received adds its (inflated) data to `inputCRC` before the checksum is compared (§3.5), whether or not the
///    frame's message is kept.
/// 3. Frames pass `deflater` / `inflater` in wire order; ACKs never do.
/// 4. What a peer can make this side hold is bounded: `incompleteBytes` ≤ `maxIncompleteIncomingBytes`, pending
///    messages ≤ `maxIncompleteIncomingMessages`, each ≤ `maxIncomingMessageBytes`, each frame's inflation ≤
///    `maxInflatedFrameBytes`. A violation throws and the connection stays failed (`failure`).
///
/// ```
///   enqueue ──▶ outbox ──nextFrame──▶ (more data?) ──no──▶ done
///                 ▲                        │yes
///                 │              unacked < window? ──no──▶ icebox ──ACK──┐
///                 └────────────────────────┴yes◀──────────────────────────┘
/// ```
public struct BLIPConnection: ~Copyable {
    /// The protocol numbers and bounds; the defaults are `Limits`' (tests shrink them).
    public struct Configuration: Sendable {
        /// Bytes per frame, header and checksum included (`Limits.blipFrameBytes`, 16 KiB; a deflated frame may be a
        /// few bytes longer when its data does not compress).
        public var frameBytes = Limits.blipFrameBytes
        /// Bytes per frame of a normal message with an urgent one right behind it (`Limits.blipSmallFrameBytes`).
        public var smallFrameBytes = Limits.blipSmallFrameBytes
        /// Largest incoming frame in bytes (`Limits.blipMaxFrameBytes`); past it `.frameTooLarge`.
        public var maxFrameBytes = Limits.blipMaxFrameBytes
        /// Largest incoming property block in bytes (`Limits.blipMaxPropertiesBytes`); past it `.propertiesTooLarge`.
        public var maxPropertiesBytes = Limits.blipMaxPropertiesBytes
        /// Largest incoming message (data after inflation) in bytes; past it `.messageTooLarge`.
        public var maxIncomingMessageBytes = Limits.blipMaxIncomingMessageBytes
        /// Incoming messages begun and not finished; one more is `.tooManyIncompleteMessages`.
        public var maxIncompleteIncomingMessages = Limits.blipMaxIncompleteIncomingMessages
        /// Bytes those messages hold together; past it `.incompleteBytesExceeded`.
        public var maxIncompleteIncomingBytes = Limits.blipMaxIncompleteIncomingBytes
        /// Bytes one compressed frame may inflate to; past it `.inflatedFrameTooLarge`.
        public var maxInflatedFrameBytes = Limits.blipMaxInflatedFrameBytes
        /// Bytes received of one message between the ACKs this side sends (§3.7: 50,000).
        public var ackIntervalBytes = Limits.blipAckIntervalBytes
        /// Unacknowledged bytes of one outgoing message at which its frames stop until an ACK (§3.7: 128,000).
        public var maxUnackedBytes = Limits.blipMaxUnackedBytes
        /// Outgoing bytes queued past which `hasRoom(for:)` says no (the session's senders then wait).
        public var maxQueuedOutgoingBytes = Limits.blipMaxQueuedOutgoingBytes
        /// zlib level for compressed messages (LiteCore's default, 6).
        public var compressionLevel: Int32 = 6

        public init() {}
    }

    struct Outgoing {
        var number: UInt64
        var type: UInt8
        var urgent: Bool
        var noReply: Bool
        var compressed: Bool
        var data: [UInt8]
        var offset = 0
        /// Bytes after the frame headers sent so far (data as sent, checksums), as the receiver counts them.
        var bytesSent: UInt64 = 0
        var bytesAcked: UInt64 = 0
        var isResponse: Bool { type != 0 }
        var started: Bool { offset > 0 }
        var unacked: UInt64 { bytesSent &- bytesAcked }
    }

    struct Incoming {
        var type: UInt8
        var flags: BLIPFrame.Flags
        var data: [UInt8] = []
        var rawBytes: UInt64 = 0
        var unackedBytes = 0
        /// False until the properties length was read and checked.
        var propertiesChecked = false
        /// A response nobody waits for: read (to keep the checksum and deflate context) and dropped.
        var discard = false
    }

    public let configuration: Configuration
    var outbox: [Outgoing] = []
    var icebox: [Outgoing] = []
    /// ACKs to send, at most one per message: a newer count replaces an unsent older one.
    var acks: [(number: UInt64, ofResponse: Bool, bytes: UInt64)] = []
    var requestsIn: [UInt64: Incoming] = [:]
    var responsesIn: [UInt64: Incoming] = [:]
    var awaitingResponse: Set<UInt64> = []
    var lastRequestSent: UInt64 = 0
    var lastRequestReceived: UInt64 = 0
    var incompleteBytes = 0
    var outputCRC: UInt32 = 0
    var inputCRC: UInt32 = 0
    /// Made on the first compressed frame each way (zlib's state is ~256 KiB to deflate, ~40 KiB to inflate; most
    /// connections of the fuzz loop and many real ones never need it).
    var deflater: BLIPDeflater?
    var inflater: BLIPInflater?
    /// The violation that failed the connection; every later `receive` throws it again.
    public private(set) var failure: BLIPProtocolViolation?
    /// Uncompressed bytes queued and not yet framed (both boxes).
    public private(set) var queuedOutgoingBytes = 0

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// Whether a message of `bytes` encoded bytes fits the out-box bound now (an empty out-box takes any size).
    public func hasRoom(for bytes: Int) -> Bool {
        queuedOutgoingBytes == 0 || queuedOutgoingBytes + bytes <= configuration.maxQueuedOutgoingBytes
    }

    /// Whether `nextFrame()` has something to return.
    public var hasFrameToSend: Bool { !acks.isEmpty || !outbox.isEmpty }

    /// Requests sent that still wait for their response.
    public var requestsAwaitingResponse: Set<UInt64> { awaitingResponse }

    // MARK: Outgoing

    /// Queues a message to send. A request gets the next request number (its `number` is ignored); a response or
    /// error keeps `number`, the request it answers. `compressed` sends its frames through the deflate context.
    /// - Returns: the message's number.
    /// - Throws: `BLIPProtocolViolation.cannotSend` for an ACK type or a property holding a NUL.
    @discardableResult
    public mutating func enqueue(_ message: BLIPMessage) throws(BLIPProtocolViolation) -> UInt64 {
        let data = try BLIPProperties.encodeMessageData(message.properties, body: message.body)
        let number: UInt64
        switch message.type {
        case .request:
            lastRequestSent += 1
            number = lastRequestSent
            if !message.noReply { awaitingResponse.insert(number) }
        case .response, .error:
            number = message.number
        case .ackRequest, .ackResponse:
            throw .cannotSend("ACKs are the connection's own")
        }
        let out = Outgoing(
            number: number, type: message.type.rawValue, urgent: message.urgent,
            noReply: message.type == .request && message.noReply, compressed: message.compressed, data: data)
        queuedOutgoingBytes += data.count
        requeue(out, isNew: true)
        return number
    }

    /// Where a message goes in the out-box (§3.2): normal ones at the tail (round robin); an urgent one after the
    /// last urgent one with one normal message between them if there is one, else after the first message, and a
    /// new one never ahead of a message not yet begun.
    mutating func requeue(_ message: Outgoing, isNew: Bool) {
        guard message.urgent, outbox.count > 1 else {
            outbox.append(message)
            return
        }
        var i = outbox.count - 1
        var at = 1
        while true {
            if outbox[i].urgent {
                at = min(i + 2, outbox.count)
                break
            }
            if isNew && !outbox[i].started {
                at = i + 1
                break
            }
            if i == 0 { break }
            i -= 1
        }
        outbox.insert(message, at: at)
    }

    /// The next frame to write: pending ACKs first, then one frame of the message at the head of the out-box.
    /// Returns nil when there is none (out-box empty or every message waiting for an ACK).
    public mutating func nextFrame() -> [UInt8]? {
        if !acks.isEmpty {
            let ack = acks.removeFirst()
            return BLIPFrame.ack(number: ack.number, ofResponse: ack.ofResponse, bytesReceived: ack.bytes)
        }
        guard !outbox.isEmpty else { return nil }
        var message = outbox.removeFirst()
        // A big frame unless an urgent message waits right behind this normal one (LiteCore, go-blip).
        let frameBytes =
            !message.urgent && outbox.first?.urgent == true ? configuration.smallFrameBytes : configuration.frameBytes
        let room = max(1, frameBytes - BLIPVarint.length(of: message.number) - 1 - 4)
        let end = min(message.data.count, message.offset + room)
        let chunk = message.data[message.offset..<end]
        let more = end < message.data.count
        var flags = BLIPFrame.Flags(type: message.type)
        if message.urgent { flags.insert(.urgent) }
        if message.noReply { flags.insert(.noReply) }
        if more { flags.insert(.moreComing) }
        var body = chunk
        if message.compressed && deflater == nil { deflater = BLIPDeflater(level: configuration.compressionLevel) }
        // Without a deflate context (zlib out of memory) the frame goes uncompressed: the flag is per frame (§3.6).
        if message.compressed, let deflated = deflater?.compress(chunk) {
            flags.insert(.compressed)
            body = deflated[...]
        }
        var frame = BLIPFrame.header(number: message.number, flags: flags)
        frame.reserveCapacity(frame.count + body.count + 4)
        frame.append(contentsOf: body)
        outputCRC = chunk.withUnsafeBytes { CRC32.update(outputCRC, $0) }
        BLIPFrame.appendChecksum(outputCRC, to: &frame)
        message.bytesSent += UInt64(body.count + 4)
        message.offset = end
        queuedOutgoingBytes -= chunk.count
        if more {
            if message.unacked >= UInt64(configuration.maxUnackedBytes) {
                icebox.append(message)
            } else {
                requeue(message, isNew: false)
            }
        }
        return frame
    }

    mutating func receivedAck(number: UInt64, ofResponse: Bool, bytes: UInt64) {
        let matches = { (m: Outgoing) in m.number == number && m.isResponse == ofResponse }
        if let i = outbox.firstIndex(where: matches) {
            if bytes <= outbox[i].bytesSent { outbox[i].bytesAcked = max(outbox[i].bytesAcked, bytes) }
        } else if let i = icebox.firstIndex(where: matches) {
            // A count above what was sent is a confused peer; it may not switch flow control off (LiteCore ignores it).
            guard bytes <= icebox[i].bytesSent else { return }
            icebox[i].bytesAcked = max(icebox[i].bytesAcked, bytes)
            if icebox[i].unacked < UInt64(configuration.maxUnackedBytes) {
                requeue(icebox.remove(at: i), isNew: false)
            }
        }
        // An ACK of a message already sent in full, or never sent, changes nothing.
    }

    // MARK: Incoming

    /// Takes one frame (one binary WebSocket message) and returns the messages it completed.
    ///
    /// ACKs resume outgoing messages; frames of undefined types (3, 6, 7) are ignored (§3.8); a response to a
    /// request this side sent but no longer waits for (a no-reply one, or answered) is read and dropped.
    /// - Throws: `BLIPProtocolViolation` (see its cases); the connection then stays failed.
    public mutating func receive(frame bytes: [UInt8]) throws(BLIPProtocolViolation) -> [BLIPMessage] {
        if let failure { throw failure }
        do {
            return try receiveFrame(bytes)
        } catch {
            failure = error
            throw error
        }
    }

    mutating func receiveFrame(_ bytes: [UInt8]) throws(BLIPProtocolViolation) -> [BLIPMessage] {
        let frame = try BLIPFrame.parse(bytes, maxBytes: configuration.maxFrameBytes)
        let type = frame.flags.typeBits
        if frame.isAck {
            var i = frame.payload.startIndex
            let count: UInt64
            do {
                count = try BLIPVarint.decode(frame.payload, at: &i)
            } catch {
                throw .badVarint(field: "ACK byte count", error)
            }
            receivedAck(number: frame.number, ofResponse: type == 5, bytes: count)
            return []
        }
        guard type <= 2 else { return [] }
        guard let checksum = BLIPFrame.readChecksum(frame.payload) else { throw .missingChecksum }
        let data = frame.payload.dropLast(4)
        let more = frame.flags.contains(.moreComing)
        let isRequest = type == 0

        // The message this frame belongs to, taken out of its table while it grows: a copy left in the table would
        // make each frame's append copy the whole message so far (quadratic: a 24 MiB message in 16 KiB frames
        // copied ~19 GB). A frame that throws fails the connection, so nothing needs putting back.
        var message: Incoming
        let continued: Bool
        if let existing = isRequest
            ? requestsIn.removeValue(forKey: frame.number) : responsesIn.removeValue(forKey: frame.number)
        {
            message = existing
            continued = true
        } else {
            continued = false
            if isRequest {
                guard frame.number == lastRequestReceived &+ 1 else {
                    throw .unexpectedRequestNumber(frame.number, next: lastRequestReceived &+ 1)
                }
            } else if !awaitingResponse.contains(frame.number) && frame.number > lastRequestSent {
                throw .unexpectedResponseNumber(frame.number)
            }
            if more && requestsIn.count + responsesIn.count >= configuration.maxIncompleteIncomingMessages {
                throw .tooManyIncompleteMessages(limit: configuration.maxIncompleteIncomingMessages)
            }
            message = Incoming(type: type, flags: frame.flags)
            message.discard = !isRequest && !awaitingResponse.contains(frame.number)
            if isRequest { lastRequestReceived = frame.number }
        }

        // How many more bytes this frame may add: the message bound, and (if it stays incomplete) the connection's.
        let before = message.data.count
        let messageRoom = configuration.maxIncomingMessageBytes - before
        let connectionRoom =
            more
            ? configuration.maxIncompleteIncomingBytes - (incompleteBytes - (continued ? before : 0)) - before
            : Int.max
        let room = min(messageRoom, connectionRoom)
        let roomError: BLIPProtocolViolation =
            messageRoom <= connectionRoom
            ? .messageTooLarge(limit: configuration.maxIncomingMessageBytes)
            : .incompleteBytesExceeded(limit: configuration.maxIncompleteIncomingBytes)

        if frame.flags.contains(.compressed) {
            if inflater == nil { inflater = BLIPInflater() }
            guard let inflater else { throw .badDeflateData("zlib could not allocate an inflate context") }
            let limit = min(room, configuration.maxInflatedFrameBytes)
            do {
                try inflater.inflate(data, limit: limit, appendingTo: &message.data)
            } catch .inflatedFrameTooLarge {
                throw room < configuration.maxInflatedFrameBytes
                    ? roomError : .inflatedFrameTooLarge(limit: configuration.maxInflatedFrameBytes)
            }
        } else {
            guard data.count <= room else { throw roomError }
            message.data.append(contentsOf: data)
        }
        inputCRC = message.data[before...].withUnsafeBytes { CRC32.update(inputCRC, $0) }
        guard inputCRC == checksum else { throw .checksumMismatch(expected: inputCRC, received: checksum) }

        if !message.propertiesChecked {
            var i = message.data.startIndex
            do {
                let length = try BLIPVarint.decode(message.data, at: &i)
                guard length <= UInt64(configuration.maxPropertiesBytes) else {
                    throw BLIPProtocolViolation.propertiesTooLarge(length, limit: configuration.maxPropertiesBytes)
                }
                message.propertiesChecked = true
            } catch let e as BLIPVarint.DecodeError {
                if e == .overflow || !more { throw .badVarint(field: "properties length", e) }
            } catch let e as BLIPProtocolViolation {
                throw e
            } catch {
                throw .badProperties("\(error)")
            }
        }

        let received = frame.payload.count
        message.rawBytes += UInt64(received)
        if continued { incompleteBytes -= before }
        if more {
            incompleteBytes += message.data.count
            message.unackedBytes += received
            if message.unackedBytes >= configuration.ackIntervalBytes {
                if let i = acks.firstIndex(where: { $0.number == frame.number && $0.ofResponse == !isRequest }) {
                    acks[i].bytes = message.rawBytes
                } else {
                    acks.append((frame.number, !isRequest, message.rawBytes))
                }
                message.unackedBytes = 0
            }
            if isRequest { requestsIn[frame.number] = message } else { responsesIn[frame.number] = message }
            return []
        }

        if message.discard { return [] }
        let (properties, body) = try BLIPProperties.decodeMessageData(
            message.data[...], maxPropertiesBytes: configuration.maxPropertiesBytes)
        if !isRequest { awaitingResponse.remove(frame.number) }
        let first = message.flags
        return [
            BLIPMessage(
                number: frame.number, type: BLIPMessage.MessageType(rawValue: message.type) ?? .request,
                urgent: first.contains(.urgent), noReply: isRequest && first.contains(.noReply),
                compressed: first.contains(.compressed), properties: properties, body: body)
        ]
    }
}
