import SetteeBLIP
import SetteeCore
import Testing

/// Moves frames between two connections the way a WebSocket would, in order, with nothing lost.
struct Wire {
    /// Every frame `from` has, into `to`; returns the messages `to` completed, and counts the frames.
    static func deliver(
        _ from: inout BLIPConnection, _ to: inout BLIPConnection, frames: inout [[UInt8]]
    ) throws(BLIPProtocolViolation) -> [BLIPMessage] {
        var out: [BLIPMessage] = []
        while let frame = from.nextFrame() {
            frames.append(frame)
            out += try to.receive(frame: frame)
        }
        return out
    }

    /// Both ways until neither side has anything to send: (messages a completed, messages b completed).
    static func settle(
        _ a: inout BLIPConnection, _ b: inout BLIPConnection
    ) throws(BLIPProtocolViolation) -> (a: [BLIPMessage], b: [BLIPMessage]) {
        var toA: [BLIPMessage] = []
        var toB: [BLIPMessage] = []
        var frames: [[UInt8]] = []
        while a.hasFrameToSend || b.hasFrameToSend {
            toB += try deliver(&a, &b, frames: &frames)
            toA += try deliver(&b, &a, frames: &frames)
        }
        return (toA, toB)
    }
}

/// A data frame built by hand, its checksum the CRC of `data` continuing `crc` (the running value of this direction).
func handFrame(
    number: UInt64, type: UInt8 = 0, flags: BLIPFrame.Flags = [], data: [UInt8], crc: UInt32 = 0
) -> [UInt8] {
    var frame = BLIPFrame.header(number: number, flags: BLIPFrame.Flags(type: type, flags))
    frame += data
    BLIPFrame.appendChecksum(data.withUnsafeBytes { CRC32.update(crc, $0) }, to: &frame)
    return frame
}

/// Message data for properties and a body.
func messageData(_ properties: [(name: String, value: String)] = [], _ body: [UInt8] = []) -> [UInt8] {
    (try? BLIPProperties.encodeMessageData(properties, body: body)) ?? []
}

@Suite struct BLIPConnectionTests {
    static func randomString(_ rng: inout SplitMix64) -> String {
        let alphabet = Array("abcXYZ019 _-/:é漢🙂\"{}")
        return String((0..<Int(rng.next() % 24)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] })
    }

    static func randomMessage(_ rng: inout SplitMix64) -> BLIPMessage {
        let props = (0..<Int(rng.next() % 5)).map { _ in (name: randomString(&rng), value: randomString(&rng)) }
        let size = [0, 1, 100, 5_000, 16_380, 40_000, 300_000][Int(rng.next() % 7)]
        // Half the bodies compress well (repeated JSON), half not at all.
        let compressible = rng.next() % 2 == 0
        let body = (0..<size).map { i in
            compressible ? Array(#"{"k":12,"v":"abc"}"#.utf8)[i % 18] : UInt8(truncatingIfNeeded: rng.next())
        }
        return BLIPMessage(
            urgent: rng.next() % 4 == 0, noReply: rng.next() % 3 == 0, compressed: rng.next() % 2 == 0,
            properties: props, body: body)
    }

    @Test func seededRandomMessagesRoundTrip() throws {
        // Proves requests of random properties (UTF-8 of 1-4 bytes a character, empty names and values), sizes (0 to
        // 300 KB: one frame, many, past the ACK window), compression, urgency and no-reply arrive whole and in their
        // numbers, both directions at once, and their responses come back to the right request.
        let seed = UInt64.random(in: 0...UInt64.max)
        print("seededRandomMessagesRoundTrip seed \(seed)")
        var rng = SplitMix64(seed: seed)
        for _ in 0..<6 {
            var a = BLIPConnection()
            var b = BLIPConnection()
            let sentA = (0..<Int(1 + rng.next() % 8)).map { _ in Self.randomMessage(&rng) }
            let sentB = (0..<Int(rng.next() % 4)).map { _ in Self.randomMessage(&rng) }
            for m in sentA { try a.enqueue(m) }
            for m in sentB { try b.enqueue(m) }
            let (gotA, gotB) = try Wire.settle(&a, &b)
            for (sent, got) in [(sentA, gotB), (sentB, gotA)] {
                #expect(got.count == sent.count, "seed \(seed)")
                for g in got {
                    var expected = sent[Int(g.number) - 1]
                    expected.number = g.number
                    #expect(g == expected, "seed \(seed): message #\(g.number)")
                }
            }
            // b answers every request of a's that wants one; a sees each answer once, as its request's.
            for request in gotB where !request.noReply {
                try b.enqueue(
                    BLIPMessage(
                        number: request.number, type: request.number % 2 == 0 ? .response : .error,
                        compressed: true, properties: [("n", "\(request.number)")], body: request.body.reversed()))
            }
            let answers = try Wire.settle(&a, &b).a
            #expect(answers.count == gotB.filter { !$0.noReply }.count, "seed \(seed)")
            for answer in answers {
                #expect(answer["n"] == "\(answer.number)")
                #expect(answer.type == (answer.number % 2 == 0 ? .response : .error))
                #expect(answer.body == sentA[Int(answer.number) - 1].body.reversed())
            }
            #expect(a.requestsAwaitingResponse.isEmpty)
        }
    }

    @Test func compressionSharesOneContextAcrossFramesAndMessages() throws {
        // Proves a compressed message spans several frames, each flagged compressed and smaller than its data, and that
        // the context carries over: the same message sent again costs far fewer bytes (deflate refers back to the
        // first copy), and both arrive intact.
        var a = BLIPConnection()
        var b = BLIPConnection()
        // 20,000 letters of an 8-letter alphabet: about 3 bits a byte, two frames, all within deflate's 32 KiB window.
        var rng = SplitMix64(seed: 7)
        let body = (0..<20_000).map { _ in UInt8(ascii: "a") + UInt8(rng.next() % 8) }
        var frames: [[UInt8]] = []
        try a.enqueue(BLIPMessage(compressed: true, properties: [("Profile", "rev")], body: body))
        var got = try Wire.deliver(&a, &b, frames: &frames)
        let firstBytes = frames.reduce(0) { $0 + $1.count }
        #expect(frames.count > 1)
        #expect(frames.allSatisfy { (try? BLIPFrame.parse($0, maxBytes: 1 << 20).flags.contains(.compressed)) == true })
        #expect(firstBytes < body.count / 2)
        frames = []
        try a.enqueue(BLIPMessage(compressed: true, properties: [("Profile", "rev")], body: body))
        got += try Wire.deliver(&a, &b, frames: &frames)
        _ = try Wire.settle(&a, &b)
        let secondBytes = frames.reduce(0) { $0 + $1.count }
        #expect(secondBytes < firstBytes / 4, "second copy \(secondBytes) B, first \(firstBytes) B")
        #expect(got.count == 2 && got.allSatisfy { $0.body == body && $0.compressed && $0.profile == "rev" })
    }

    @Test func aChecksumMismatchIsFatal() throws {
        // Proves a frame whose checksum is not the running CRC-32 fails the connection, that a corrupted byte of
        // uncompressed data is caught by it, and that the failed connection refuses every later frame.
        var a = BLIPConnection()
        var b = BLIPConnection()
        try a.enqueue(BLIPMessage(properties: [("Profile", "x")], body: Array("hello".utf8)))
        guard var frame = a.nextFrame() else { throw Failure("no frame") }
        frame[frame.count - 6] ^= 0x01
        #expect {
            try b.receive(frame: frame)
        } throws: { error in
            guard case .checksumMismatch = error as? BLIPProtocolViolation else { return false }
            return true
        }
        let failed = b.failure != nil
        #expect(failed)
        #expect(throws: BLIPProtocolViolation.self) { try b.receive(frame: handFrame(number: 1, data: messageData())) }
        // The checksum runs over everything sent in the direction: a second frame checked alone (from 0) fails.
        var c = BLIPConnection()
        _ = try c.receive(frame: handFrame(number: 1, data: messageData([("a", "b")])))
        #expect(throws: BLIPProtocolViolation.self) { try c.receive(frame: handFrame(number: 2, data: messageData())) }
    }

    @Test func hostileFramesAreTypedErrors() throws {
        // Proves each malformed shape a peer can send is a typed violation (never a trap, never kept): empty frame,
        // truncated and over-long varints in the header and the properties length, a missing checksum, huge property
        // lengths, requests out of order, responses to nothing, bad property blocks and ACK bodies.
        var cases: [(String, [UInt8], (BLIPProtocolViolation) -> Bool)] = [
            ("empty", [], { $0 == .emptyFrame }),
            ("truncated number", [0x80], { $0 == .badVarint(field: "message number", .truncated) }),
            ("truncated flags", [0x01], { $0 == .badVarint(field: "frame flags", .truncated) }),
            (
                "11-byte number", [UInt8](repeating: 0x81, count: 10) + [0x01, 0x00],
                {
                    $0 == .badVarint(field: "message number", .overflow)
                }
            ),
            (
                "10-byte number past 64 bits", [UInt8](repeating: 0xFF, count: 9) + [0x7F, 0x00],
                {
                    $0 == .badVarint(field: "message number", .overflow)
                }
            ),
            ("no checksum", [0x01, 0x00, 0x00, 0x00], { $0 == .missingChecksum }),
            ("ACK without count", [0x01, 0x04], { $0 == .badVarint(field: "ACK byte count", .truncated) }),
            (
                "request #5 first", handFrame(number: 5, data: messageData()),
                {
                    $0 == .unexpectedRequestNumber(5, next: 1)
                }
            ),
            ("request #0", handFrame(number: 0, data: messageData()), { $0 == .unexpectedRequestNumber(0, next: 1) }),
            (
                "response to nothing", handFrame(number: 3, type: 1, data: messageData()),
                {
                    $0 == .unexpectedResponseNumber(3)
                }
            ),
            (
                "huge properties length", handFrame(number: 1, data: BLIPVarint.encoded(1 << 40) + [0x41]),
                {
                    $0 == .propertiesTooLarge(1 << 40, limit: Limits.blipMaxPropertiesBytes)
                }
            ),
            (
                "properties length past the end", handFrame(number: 1, data: [0x05, 0x61, 0x00]),
                {
                    $0 == .badProperties("the message ends inside its properties")
                }
            ),
            (
                "properties without NUL", handFrame(number: 1, data: [0x03, 0x61, 0x00, 0x62]),
                {
                    $0 == .badProperties("the block does not end with a NUL")
                }
            ),
            (
                "name without value", handFrame(number: 1, data: [0x02, 0x61, 0x00]),
                {
                    $0 == .badProperties("a name without a value")
                }
            ),
            (
                "properties not UTF-8", handFrame(number: 1, data: [0x04, 0xC3, 0x00, 0x62, 0x00]),
                {
                    $0 == .badProperties("a name or value is not UTF-8")
                }
            ),
            (
                "11-byte properties length", handFrame(number: 1, data: [UInt8](repeating: 0x80, count: 11)),
                {
                    $0 == .badVarint(field: "properties length", .overflow)
                }
            ),
            (
                "frame too large", [UInt8](repeating: 0x01, count: Limits.blipMaxFrameBytes + 1),
                {
                    $0 == .frameTooLarge(Limits.blipMaxFrameBytes + 1, limit: Limits.blipMaxFrameBytes)
                }
            ),
            (
                "not deflate", handFrame(number: 1, flags: .compressed, data: [0xFF, 0xFF, 0xFF]),
                {
                    if case .badDeflateData = $0 { return true } else { return false }
                }
            ),
        ]
        cases.append(
            (
                "final deflate block", handFrame(number: 1, flags: .compressed, data: [0x03, 0x00]),
                {
                    if case .badDeflateData = $0 { return true } else { return false }
                }
            ))
        for (name, frame, check) in cases {
            var c = BLIPConnection()
            do {
                let got = try c.receive(frame: frame)
                Issue.record("\(name): accepted, \(got)")
            } catch {
                #expect(check(error), "\(name): \(error)")
                let kept = c.failure
                #expect(kept == error)
            }
        }
        // Undefined types are ignored (§3.8), not fatal; the frames after them still check out.
        var c = BLIPConnection()
        let ignored = try c.receive(frame: handFrame(number: 9, type: 3, data: [1, 2, 3]))
        #expect(ignored.isEmpty)
        let after = try c.receive(frame: handFrame(number: 1, data: messageData([("a", "b")])))
        #expect(after.count == 1)
        // pythonblip writes no properties as one NUL: read as none.
        var p = BLIPConnection()
        let lone = try p.receive(frame: handFrame(number: 1, data: [0x01, 0x00, 0x7B, 0x7D]))
        #expect(lone.first?.body == Array("{}".utf8) && lone.first?.properties.isEmpty == true)
    }

    @Test func boundsStopBigMessagesManyMessagesAndBombs() throws {
        // Proves the incoming bounds hold whatever the frames look like: a message past its byte bound (uncompressed or
        // inflated), too many begun messages, incomplete messages together past their bound, and one small compressed
        // frame inflating past the per-frame bound (a decompression bomb) all fail with their violation, having held
        // at most the bound.
        var config = BLIPConnection.Configuration()
        config.maxIncomingMessageBytes = 10_000
        config.maxIncompleteIncomingMessages = 3
        config.maxIncompleteIncomingBytes = 12_000
        config.maxInflatedFrameBytes = 50_000

        func expectViolation(_ name: String, _ expected: BLIPProtocolViolation, _ frames: [[UInt8]]) {
            var c = BLIPConnection(configuration: config)
            do {
                for f in frames { _ = try c.receive(frame: f) }
                Issue.record("\(name): accepted")
            } catch {
                #expect(error == expected, "\(name)")
            }
        }
        // One message, two frames of 6,000 bytes: past 10,000.
        let half = [UInt8](repeating: 0x61, count: 6_000)
        var crc: UInt32 = 0
        let f1 = handFrame(number: 1, flags: .moreComing, data: [0] + half)
        crc = CRC32.checksum([0] + half)
        expectViolation(
            "message bound", .messageTooLarge(limit: 10_000), [f1, handFrame(number: 1, data: half, crc: crc)])
        // Four begun messages.
        var frames: [[UInt8]] = []
        crc = 0
        for n in 1...4 {
            frames.append(handFrame(number: UInt64(n), flags: .moreComing, data: [0], crc: crc))
            crc = CRC32.update(crc, [UInt8(0)].withUnsafeBytes { $0 })
        }
        expectViolation("incomplete count", .tooManyIncompleteMessages(limit: 3), frames)
        // Two begun messages of 7,000 bytes each: 14,000 held, past 12,000.
        let seven = [0] + [UInt8](repeating: 0x62, count: 6_999)
        frames = [handFrame(number: 1, flags: .moreComing, data: seven)]
        frames.append(handFrame(number: 2, flags: .moreComing, data: seven, crc: CRC32.checksum(seven)))
        expectViolation("incomplete bytes", .incompleteBytesExceeded(limit: 12_000), frames)

        // A bomb: 1 MB of zeros deflated (about 1 KB) in one frame.
        var sender = BLIPConnection()
        var big = BLIPConnection.Configuration()
        big.frameBytes = 1 << 22
        sender = BLIPConnection(configuration: big)
        try sender.enqueue(BLIPMessage(compressed: true, body: [UInt8](repeating: 0, count: 1_000_000)))
        let bombFrame = sender.nextFrame()
        let bomb = try #require(bombFrame)
        #expect(bomb.count < 2_000)
        var bombConfig = config
        bombConfig.maxIncomingMessageBytes = 1 << 22
        bombConfig.maxIncompleteIncomingBytes = 1 << 22
        var victim = BLIPConnection(configuration: bombConfig)
        #expect(throws: BLIPProtocolViolation.inflatedFrameTooLarge(limit: 50_000)) { try victim.receive(frame: bomb) }
        // And with a frame bound above the message bound, the message bound is what stops it.
        var victim2 = BLIPConnection(configuration: config)
        #expect(throws: BLIPProtocolViolation.messageTooLarge(limit: 10_000)) { try victim2.receive(frame: bomb) }
    }

    @Test func aPeerThatNeverAcksStopsTheSenderAtTheWindow() throws {
        // Proves flow control (§3.7): a 1 MB message to a peer whose ACKs never come back stops once the unacknowledged
        // bytes reach the window (128,000 plus at most one frame), with `nextFrame()` answering nil while it waits;
        // the receiver meanwhile passed two ACK points (50,000 and 100,000 bytes) and, since its ACKs were not written
        // yet, holds one ACK with the newer count; delivering it resumes the message, which then
        // completes.
        var a = BLIPConnection()
        var b = BLIPConnection()
        try a.enqueue(BLIPMessage(body: [UInt8](repeating: 7, count: 1_000_000)))
        var sent = 0
        var got: [BLIPMessage] = []
        while let frame = a.nextFrame() {
            sent += frame.count - 2
            got += try b.receive(frame: frame)
        }
        #expect(sent >= Limits.blipMaxUnackedBytes)
        #expect(sent < Limits.blipMaxUnackedBytes + Limits.blipFrameBytes)
        let stopped = a.nextFrame()
        #expect(stopped == nil)
        #expect(got.isEmpty)
        // b holds one ACK (type 4, urgent, no-reply) counting at least 100,000 bytes.
        var acks: [[UInt8]] = []
        while let ack = b.nextFrame() { acks.append(ack) }
        #expect(acks.count == 1)
        for ack in acks {
            let f = try BLIPFrame.parse(ack, maxBytes: 64)
            #expect(f.isAck && f.flags.typeBits == 4 && f.flags.contains([.urgent, .noReply]) && f.number == 1)
            var i = f.payload.startIndex
            let count = try BLIPVarint.decode(f.payload, at: &i)
            #expect(count >= 100_000 && count <= UInt64(sent))
        }
        for ack in acks { _ = try a.receive(frame: ack) }
        let resumed = a.hasFrameToSend
        #expect(resumed)
        let rest = try Wire.settle(&a, &b)
        #expect(rest.b.count == 1 && rest.b.first?.body.count == 1_000_000)
    }

    @Test func messagesInterleaveFrameByFrame() throws {
        // Proves multiplexing (§3.2): two long messages queued together go out alternately, one frame each, and a
        // short one queued behind them finishes before either long one does.
        var a = BLIPConnection()
        try a.enqueue(BLIPMessage(body: [UInt8](repeating: 1, count: 60_000)))
        try a.enqueue(BLIPMessage(body: [UInt8](repeating: 2, count: 60_000)))
        try a.enqueue(BLIPMessage(body: [3]))
        var order: [UInt64] = []
        while let f = a.nextFrame() { order.append(try BLIPFrame.parse(f, maxBytes: 1 << 20).number) }
        #expect(Array(order.prefix(5)) == [1, 2, 3, 1, 2])
        #expect(order.count == 9)
    }

    @Test func urgentMessagesGoAheadWithoutStarvingOrReordering() throws {
        // Proves §3.2's urgent rule: an urgent message goes right after the message being sent and ahead of normal ones
        // already begun, the normal frame in front of it shrinks to the small size, yet normal messages still get a
        // frame between urgent ones; and a new urgent request is never begun before an earlier request.
        var a = BLIPConnection()
        try a.enqueue(BLIPMessage(body: [UInt8](repeating: 1, count: 100_000)))
        try a.enqueue(BLIPMessage(body: [UInt8](repeating: 2, count: 100_000)))
        var frames: [BLIPFrame] = []
        for _ in 0..<2 {
            let next = a.nextFrame()
            frames.append(try BLIPFrame.parse(try #require(next), maxBytes: 1 << 20))
        }
        try a.enqueue(BLIPMessage(urgent: true, body: [UInt8](repeating: 3, count: 50_000)))
        try a.enqueue(BLIPMessage(urgent: true, body: [UInt8](repeating: 4, count: 50_000)))
        while let f = a.nextFrame(), frames.count < 12 { frames.append(try BLIPFrame.parse(f, maxBytes: 1 << 20)) }
        let order = frames.map(\.number)
        #expect(Array(order.prefix(8)) == [1, 2, 1, 3, 2, 4, 1, 3], "\(order)")
        // A normal frame with an urgent message right behind it is small; other frames are big.
        let normalBeforeUrgent = frames[2]
        #expect(normalBeforeUrgent.payload.count <= Limits.blipSmallFrameBytes)
        #expect(frames[3].payload.count > Limits.blipSmallFrameBytes)

        // Begun in order: an urgent request queued behind two not-yet-begun requests waits for them.
        var c = BLIPConnection()
        try c.enqueue(BLIPMessage(body: [1]))
        try c.enqueue(BLIPMessage(body: [2]))
        try c.enqueue(BLIPMessage(urgent: true, body: [3]))
        var firsts: [UInt64] = []
        while let f = c.nextFrame() { firsts.append(try BLIPFrame.parse(f, maxBytes: 1 << 20).number) }
        #expect(firsts == [1, 2, 3])
    }

    @Test func ackCountsAboveWhatWasSentAreIgnored() throws {
        // Proves a hostile ACK (count beyond the bytes sent, or for a message never sent) neither resumes a frozen
        // message early nor fails the connection.
        var a = BLIPConnection()
        try a.enqueue(BLIPMessage(body: [UInt8](repeating: 7, count: 400_000)))
        while a.nextFrame() != nil {}
        _ = try a.receive(frame: BLIPFrame.ack(number: 1, ofResponse: false, bytesReceived: 10_000_000))
        _ = try a.receive(frame: BLIPFrame.ack(number: 99, ofResponse: true, bytesReceived: 5))
        let none = a.nextFrame()
        #expect(none == nil)
    }
}

struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
