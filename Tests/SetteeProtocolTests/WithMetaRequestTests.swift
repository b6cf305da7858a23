import NIOCore
import SetteeCore
import SetteeProtocol
import Testing

/// SET_WITH_META / DEL_WITH_META extras (kv_engine `docs/BinaryProtocol.md`): the four accepted lengths, the
/// options word, and hostile extras of every length up to 64 and random content never trapping.
@Suite struct WithMetaRequestTests {
    static func extras(_ bytes: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: bytes) }

    @Test func roundTripsTheTwentyEightByteForm() throws {
        let r = WithMetaRequest(
            flags: 0xdead_beef, expiry: 1_700_000_000, revSeqno: 7, cas: 0x1234_5678_9abc_0000,
            options: [.skipConflictResolution])
        var b = ByteBuffer()
        r.encode(into: &b)
        #expect(b.readableBytes == 28)
        #expect(WithMetaRequest.parse(extras: b) == r)
    }

    @Test func acceptsEachLengthAndReadsTheFixedFields() throws {
        var base = ByteBuffer()
        base.writeInteger(UInt32(5))
        base.writeInteger(UInt32(6))
        base.writeInteger(UInt64(7))
        base.writeInteger(UInt64(8))
        let plain = try #require(WithMetaRequest.parse(extras: base))
        #expect(plain == WithMetaRequest(flags: 5, expiry: 6, revSeqno: 7, cas: 8))
        var withMetaLength = base
        withMetaLength.writeInteger(UInt16(0))
        #expect(WithMetaRequest.parse(extras: withMetaLength) == plain)
        var withOptions = base
        withOptions.writeInteger(UInt32(0x02))
        #expect(WithMetaRequest.parse(extras: withOptions)?.options == .forceAcceptWithMetaOps)
        var both = withOptions
        both.writeInteger(UInt16(0))
        #expect(WithMetaRequest.parse(extras: both)?.options == .forceAcceptWithMetaOps)
        // A reader index past zero (a frame slice) is honoured.
        var offset = ByteBuffer(bytes: [0xff, 0xff])
        offset.writeImmutableBuffer(base)
        offset.moveReaderIndex(forwardBy: 2)
        #expect(WithMetaRequest.parse(extras: offset) == plain)
    }

    @Test func refusesUnknownOptionsLoneRegenerateAndExtendedMeta() {
        func with(options: UInt32?, metaLength: UInt16?) -> ByteBuffer {
            var b = ByteBuffer(repeating: 0, count: 24)
            if let options { b.writeInteger(options) }
            if let metaLength { b.writeInteger(metaLength) }
            return b
        }
        #expect(WithMetaRequest.parse(extras: with(options: 0x01, metaLength: nil)) == nil)
        #expect(WithMetaRequest.parse(extras: with(options: 0x100, metaLength: nil)) == nil)
        #expect(WithMetaRequest.parse(extras: with(options: 0x04, metaLength: nil)) == nil)
        #expect(
            WithMetaRequest.parse(extras: with(options: 0x0c, metaLength: nil))?.options == [
                .regenerateCAS, .skipConflictResolution,
            ])
        #expect(WithMetaRequest.parse(extras: with(options: nil, metaLength: 5)) == nil)
        #expect(WithMetaRequest.parse(extras: with(options: 0x08, metaLength: 1)) == nil)
    }

    /// Fuzz-style: every extras length 0...64 with seeded random bytes parses only at 24/26/28/30, and never traps.
    @Test func hostileExtrasLengthsNeverTrap() {
        var rng = SplitMix64(seed: 0x5eed_0147)
        for length in 0...64 {
            for _ in 0..<200 {
                let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                let parsed = WithMetaRequest.parse(extras: ByteBuffer(bytes: bytes))
                if !WithMetaRequest.extrasLengths.contains(length) { #expect(parsed == nil, "length \(length)") }
            }
            #expect(
                RequestShape.of(.setWithMeta)?.accepts(
                    extrasLength: length, keyLength: 1, valueLength: 0, cas: 0, maxKeyLength: 250)
                    == WithMetaRequest.extrasLengths.contains(length))
        }
        #expect(
            RequestShape.of(.delWithMeta)?.accepts(
                extrasLength: 24, keyLength: 0, valueLength: 0, cas: 0, maxKeyLength: 250) == false)
    }

}
