import SetteeBLIP
import SetteeCore
import SetteeTestSupport
import Testing

/// The BLIP codec (`SetteeBLIP`) as a peer's bytes reach it: a stream of WebSocket messages into a `BLIPConnection`.
extension FuzzTargets {
    /// Input: a mode byte, then frames, each a big-endian u16 length and that many bytes. Mode bit 0 shrinks the
    /// connection's bounds (so the message, incomplete-message, inflation and window bounds are reached by small
    /// inputs); bit 1 makes the connection also send a request first (so responses have something to answer).
    /// Findings: a message that does not survive a round trip through two fresh connections (encoded, framed,
    /// compressed if it came compressed, decoded again); an ACK or frame the connection emits that does not parse;
    /// a connection that accepts frames after it failed.
    static let blipFrame = FuzzTarget(
        // Each input also round-trips what it decoded through two fresh connections: ~2,500 inputs a second.
        name: "blip-frame", defaultIterations: 10_000,
        dictionary: [
            [0x01, 0x00], [0x01, 0x08], [0x01, 0x40], [0x01, 0x48], [0x02, 0x00], [0x01, 0x01], [0x01, 0x04],
            [0x01, 0x05], [0x00, 0x00, 0xFF, 0xFF], [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
            Array("Profile\u{0}rev\u{0}".utf8), Array("Error-Code\u{0}404\u{0}".utf8),
        ]
    ) { input in
        guard let mode = input.first else { return }
        var config = BLIPConnection.Configuration()
        if mode & 1 != 0 {
            config.maxIncomingMessageBytes = 2_000
            config.maxIncompleteIncomingMessages = 2
            config.maxIncompleteIncomingBytes = 3_000
            config.maxInflatedFrameBytes = 1_500
            config.maxPropertiesBytes = 64
            config.ackIntervalBytes = 100
            config.maxUnackedBytes = 300
            config.frameBytes = 64
            config.smallFrameBytes = 32
        }
        var connection = BLIPConnection(configuration: config)
        if mode & 2 != 0 {
            _ = try? connection.enqueue(BLIPMessage(compressed: true, properties: [("Profile", "x")], body: [1, 2, 3]))
            while connection.nextFrame() != nil {}
        }
        var rest = input.dropFirst()
        var failed = false
        while rest.count >= 2 {
            let length = Int(rest[rest.startIndex]) << 8 | Int(rest[rest.startIndex + 1])
            rest = rest.dropFirst(2)
            let frame = Array(rest.prefix(length))
            rest = rest.dropFirst(frame.count)
            let messages: [BLIPMessage]
            do {
                messages = try connection.receive(frame: frame)
            } catch {
                failed = true
                continue
            }
            if failed { throw FuzzFinding("a failed connection accepted a frame") }
            for message in messages { try roundTrip(message) }
            while let out = connection.nextFrame() {
                guard (try? BLIPFrame.parse(out, maxBytes: Limits.blipMaxFrameBytes)) != nil else {
                    throw FuzzFinding("the connection emitted a frame that does not parse: \(out)")
                }
            }
        }
    }

    /// A received message sent again through two fresh connections arrives equal.
    static func roundTrip(_ message: BLIPMessage) throws {
        var sender = BLIPConnection()
        var receiver = BLIPConnection()
        var again = message
        again.type = .request
        again.noReply = false
        guard (try? sender.enqueue(again)) != nil else {
            throw FuzzFinding("a received message cannot be sent again: \(message)")
        }
        var got: [BLIPMessage] = []
        while let frame = sender.nextFrame() {
            do {
                got += try receiver.receive(frame: frame)
            } catch {
                throw FuzzFinding("our own frames fail: \(error)")
            }
        }
        again.number = 1
        guard got == [again] else { throw FuzzFinding("round trip changed \(message) into \(got)") }
    }
}

extension FuzzTests {
    @Test func blipFrames() async {
        // Proves the BLIP connection takes any sequence of frames (its corpus and seeded mutations of it) without a
        // trap, and that every message it accepts survives a round trip through fresh connections.
        guard Fuzz.selected("blip-frame") else { return }
        Self.check(await Fuzz.run(FuzzTargets.blipFrame))
    }
}
