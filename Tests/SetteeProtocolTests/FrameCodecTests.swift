import NIOCore
import SetteeCore
import Testing

@testable import SetteeProtocol

@Suite struct FrameCodecTests {
    /// Proves a request written by the encoder decodes back section by section, without copying.
    /// Regression: GET_META and the with-meta writes (quiet ones too) name a document, so a collection-aware
    /// connection's keys carry the collection prefix the node strips; left out, a restore's SET_WITH_META into a named
    /// collection stored `LEB128(id) ‖ key` as a key of the default collection. SNAPSHOT_VB_STATES and
    /// VBUCKET_BATCH_COUNT carry none.
    @Test func metaOpcodesCarryDocumentKeys() {
        for raw: UInt8 in [0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa8, 0xa9] {
            #expect(Opcode(raw).carriesDocumentKey, "0x\(String(raw, radix: 16))")
        }
        #expect(Opcode.setWithMeta.carriesDocumentKey && Opcode.delWithMeta.carriesDocumentKey)
        for raw: UInt8 in [0xa6, 0xa7] { #expect(!Opcode(raw).carriesDocumentKey) }
    }

    @Test func requestRoundTrip() throws {
        var buf = ByteBuffer()
        buf.writeRequest(
            opcode: .set, vbucket: 389, opaque: 7, cas: 42, datatype: 1, extras: [0, 0, 0, 1, 0, 0, 0, 0],
            key: Array("doc1".utf8), value: Array("{}".utf8))
        let frame = try #require(try FrameDecoder.decode(&buf, maxBodyLength: 1 << 20))
        #expect(frame.magic == .clientRequest)
        #expect(frame.opcode == .set)
        #expect(frame.vbucket == 389)
        #expect(frame.opaque == 7)
        #expect(frame.cas == 42)
        #expect(frame.datatype == 1)
        #expect(frame.extras.readableBytes == 8)
        #expect(String(buffer: frame.key) == "doc1")
        #expect(String(buffer: frame.value) == "{}")
        #expect(buf.readableBytes == 0)
    }

    /// Proves a frame split at every possible byte boundary decodes only once complete, and that
    /// nothing is consumed before then.
    @Test func partialFramesWait() throws {
        var whole = ByteBuffer()
        whole.writeRequest(opcode: .get, opaque: 1, key: Array("hello".utf8))
        let bytes = whole.readableBytesView.map { $0 }
        for cut in 0..<bytes.count {
            var part = ByteBuffer(bytes: bytes[0..<cut])
            #expect(try FrameDecoder.decode(&part, maxBodyLength: 1024) == nil)
            #expect(part.readableBytes == cut)
        }
    }

    /// Proves back-to-back frames in one buffer decode in order (pipelining).
    @Test func pipelinedFrames() throws {
        var buf = ByteBuffer()
        for i in 0..<5 { buf.writeRequest(opcode: .get, opaque: UInt32(i), key: Array("k\(i)".utf8)) }
        var seen: [UInt32] = []
        while let f = try FrameDecoder.decode(&buf, maxBodyLength: 1024) { seen.append(f.opaque) }
        #expect(seen == [0, 1, 2, 3, 4])
    }

    /// Proves the flexible-framing magic 0x08 splits header bytes 2-3 into framing-extras and key
    /// lengths, and the durability frame the real SDK sends (`13 01 23 28`) parses.
    @Test func altRequestWithDurability() throws {
        var buf = ByteBuffer()
        buf.writeRequest(
            opcode: .set, opaque: 9, framingExtras: [0x13, 0x01, 0x23, 0x28], extras: [2, 0, 0, 0, 0, 0, 0, 0],
            key: Array("doc1".utf8), value: Array("1".utf8))
        #expect(buf.getInteger(at: 0, as: UInt8.self) == 0x08)
        let frame = try #require(try FrameDecoder.decode(&buf, maxBodyLength: 1024))
        #expect(frame.framingExtras.readableBytes == 4)
        #expect(String(buffer: frame.key) == "doc1")
        let infos = try FrameInfoParser.parse(frame.framingExtras)
        #expect(infos.durabilityLevel == .majority)
        #expect(infos.durabilityTimeout == 0x2328)
        #expect(!infos.preserveTTL)
    }

    /// Proves frame-info edge cases: preserve-TTL, level-only durability, escapes, truncation, and
    /// unknown ids are reported rather than ignored.
    @Test func frameInfoEdgeCases() throws {
        #expect(try FrameInfoParser.parse(ByteBuffer(bytes: [0x50])).preserveTTL)
        #expect(try FrameInfoParser.parse(ByteBuffer(bytes: [0x11, 0x03])).durabilityLevel == .persistToMajority)
        #expect(throws: FrameInfoError.malformed) { try FrameInfoParser.parse(ByteBuffer(bytes: [0x13, 0x01])) }
        #expect(throws: FrameInfoError.malformed) { try FrameInfoParser.parse(ByteBuffer(bytes: [0xF0])) }
        #expect(throws: FrameInfoError.unsupported(4)) { try FrameInfoParser.parse(ByteBuffer(bytes: [0x40])) }
        #expect(throws: FrameInfoError.unsupported(16)) { try FrameInfoParser.parse(ByteBuffer(bytes: [0xF0, 0x01])) }
    }

    /// Proves malformed headers are typed errors: unknown magic, sections longer than the body, and a
    /// body over the limit (whose header is still returned so the caller can skip it).
    @Test func malformedHeaders() throws {
        var bad = ByteBuffer(bytes: [0x42] + [UInt8](repeating: 0, count: 23))
        #expect(throws: FrameDecodingError.unknownMagic(0x42)) { try FrameDecoder.decode(&bad, maxBodyLength: 10) }

        var inconsistent = ByteBuffer()
        inconsistent.writeRequest(opcode: .get, key: Array("abc".utf8))
        inconsistent.setInteger(UInt32(1), at: 8)  // body length 1 < key length 3
        #expect(throws: (any Error).self) { try FrameDecoder.decode(&inconsistent, maxBodyLength: 10) }

        var big = ByteBuffer()
        big.writeRequest(opcode: .set, key: Array("k".utf8), value: [UInt8](repeating: 1, count: 100))
        do {
            _ = try FrameDecoder.decode(&big, maxBodyLength: 50)
            Issue.record("expected bodyTooLarge")
        } catch {
            guard case .bodyTooLarge(let h) = error else { Issue.record("wrong error \(error)"); return }
            #expect(h.bodyLength == 101)
        }
    }

    /// Proves a response header states the right lengths and the status sits where requests keep the vBucket.
    @Test func responseEncoding() throws {
        var buf = ByteBuffer()
        buf.writeResponseHeader(
            opcode: .get, status: .keyNotFound, opaque: 5, cas: 99, extrasLength: 4, keyLength: 0, valueLength: 3)
        buf.writeInteger(UInt32(0xdead_beef))
        buf.writeString("abc")
        let frame = try #require(try FrameDecoder.decode(&buf, maxBodyLength: 100))
        #expect(frame.magic == .clientResponse)
        #expect(frame.status == .keyNotFound)
        #expect(frame.cas == 99)
        #expect(frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt32.self) == 0xdead_beef)
        #expect(String(buffer: frame.value) == "abc")
    }

    /// Proves the one-store response header and the one-read header decode put every field in its bytes, big-endian,
    /// with every bit of each field set (ADR 0065 replaced nine `writeInteger`s and ten `getInteger`s by word
    /// shifts): a field shifted one byte off, or truncated, changes the exact bytes or the decoded values.
    @Test func headerWordsAreByteExact() throws {
        var buf = ByteBuffer()
        buf.writeBytes([0xEE, 0xEE, 0xEE])  // a header that does not start at offset 0 of the storage
        buf.moveReaderIndex(forwardBy: 3)
        buf.writeResponseHeader(
            opcode: Opcode(0xA7), status: Status(0xF00D), opaque: 0x8765_4321, cas: 0x0102_0304_0506_0708,
            datatype: 0xC3, extrasLength: 255, keyLength: 65535, valueLength: 0x00FE_0000)
        let bodyLength = 255 + 65535 + 0x00FE_0000
        #expect(
            Array(buf.readableBytesView)
                == [
                    0x81, 0xA7, 0xFF, 0xFF, 0xFF, 0xC3, 0xF0, 0x0D,
                    UInt8(bodyLength >> 24), UInt8(bodyLength >> 16 & 0xFF), UInt8(bodyLength >> 8 & 0xFF),
                    UInt8(bodyLength & 0xFF), 0x87, 0x65, 0x43, 0x21,
                    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                ])
        let h = try #require(try FrameDecoder.peekHeader(buf))
        #expect(h.magic == .clientResponse)
        #expect(h.opcode == Opcode(0xA7))
        #expect(h.framingExtrasLength == 0)
        #expect(h.keyLength == 65535)
        #expect(h.extrasLength == 255)
        #expect(h.datatype == 0xC3)
        #expect(h.vbucketOrStatus == 0xF00D)
        #expect(h.bodyLength == bodyLength)
        #expect(h.opaque == 0x8765_4321)
        #expect(h.cas == 0x0102_0304_0506_0708)

        // Alt request (0x08): byte 2 is the framing extras' length, byte 3 the key's.
        let altHeader: [UInt8] = [0x08, 0x01, 0xF1, 0xE2, 0xD3, 0xC4, 0xB5, 0xA6] + [UInt8](repeating: 0xFF, count: 16)
        var alt = ByteBuffer(bytes: altHeader)
        let a = try #require(try FrameDecoder.peekHeader(alt))
        #expect(a.framingExtrasLength == 0xF1 && a.keyLength == 0xE2 && a.extrasLength == 0xD3)
        #expect(a.datatype == 0xC4 && a.vbucketOrStatus == 0xB5A6)
        #expect(a.bodyLength == 0xFFFF_FFFF && a.opaque == 0xFFFF_FFFF && a.cas == .max)
        alt.moveWriterIndex(to: 23)
        #expect(try FrameDecoder.peekHeader(alt) == nil)
    }

    /// Proves random byte streams never crash the decoder: each either decodes, waits or throws.
    /// Seeded so a failure replays; the seed is printed in the failure message.
    @Test func randomInputNeverCrashes() {
        var rng = SplitMix64(seed: 0x5e77ee)
        for round in 0..<2000 {
            let n = Int(rng.next() % 80)
            var bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if n > 0 && rng.next() % 2 == 0 { bytes[0] = [0x80, 0x08, 0x81, 0x18][Int(rng.next() % 4)] }
            var buf = ByteBuffer(bytes: bytes)
            var frames = 0
            while true {
                do {
                    guard try FrameDecoder.decode(&buf, maxBodyLength: 64) != nil else { break }
                    frames += 1
                } catch { break }
            }
            #expect(frames <= n / 24, "round \(round) seed 0x5e77ee")
            _ = try? FrameInfoParser.parse(ByteBuffer(bytes: bytes))
        }
    }

    /// The (vBucket, key) pairs `FrameDecoder.forEachRequestKey` hands over for `bytes`.
    static func requestKeys(_ bytes: [UInt8], stopAfter: Int = .max) -> [(UInt16, [UInt8])] {
        var seen: [(UInt16, [UInt8])] = []
        bytes.withUnsafeBytes { raw in
            FrameDecoder.forEachRequestKey(in: raw) { vb, key in
                seen.append((vb, Array(key)))
                return seen.count < stopAfter
            }
        }
        return seen
    }

    /// Proves the look-ahead for warmed look-ups (ADR 0114) hands over the key of each whole keyed request in
    /// order, in either magic and past extras, framing extras and values; passes over a keyless request; stops at a
    /// frame cut short, at a response, at lengths that do not add up, and when told to; and consumes nothing.
    @Test func requestKeysAreSeenAheadInOrder() throws {
        var buf = ByteBuffer()
        buf.writeRequest(opcode: .get, vbucket: 3, opaque: 1, key: Array("k0".utf8))
        buf.writeRequest(
            opcode: .set, vbucket: 5, opaque: 2, extras: [0, 0, 0, 1, 0, 0, 0, 0], key: Array("k1".utf8),
            value: Array("value".utf8))
        buf.writeRequest(opcode: .noop, opaque: 3)
        buf.writeRequest(
            opcode: .set, vbucket: 7, opaque: 4, framingExtras: [0x13, 0x01, 0x23, 0x28],
            extras: [0, 0, 0, 0, 0, 0, 0, 0],
            key: Array("k2".utf8), value: Array("1".utf8))
        let whole = Array(buf.readableBytesView)
        var get = ByteBuffer()
        get.writeRequest(opcode: .get, vbucket: 9, opaque: 5, key: Array("k3".utf8))
        let last = Array(get.readableBytesView)
        let keys = Self.requestKeys(whole + last)
        #expect(keys.map(\.0) == [3, 5, 7, 9])
        #expect(keys.map { String(decoding: $0.1, as: UTF8.self) } == ["k0", "k1", "k2", "k3"])
        #expect(Self.requestKeys(whole + last, stopAfter: 2).count == 2)
        // Cut anywhere inside the last frame: the whole ones before it are seen, the cut one is not.
        for cut in 0..<last.count { #expect(Self.requestKeys(whole + last[0..<cut]).count == 3) }
        // A response, or a request whose sections outgrow its body, ends the look-ahead.
        var response = ByteBuffer()
        response.writeResponseHeader(opcode: .get, status: .success, opaque: 6)
        #expect(Self.requestKeys(Array(response.readableBytesView) + last).isEmpty)
        var bad = last
        bad[3] = 200  // key length 200 in a body of 2 bytes
        #expect(Self.requestKeys(whole + bad + last).count == 3)
        #expect(buf.readableBytes == whole.count)
    }

    /// Proves random bytes never crash the look-ahead and every key it hands over lies inside a frame that
    /// `FrameDecoder.decode` then decodes with that same key. Seeded; the seed is in the failure message.
    @Test func randomInputNeverCrashesTheLookAhead() {
        var rng = SplitMix64(seed: 0x3a7e)
        for round in 0..<3000 {
            let n = Int(rng.next() % 120)
            var bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            // Mostly plausible headers: request magic and small lengths, so whole frames occur.
            for at in stride(from: 0, to: n - 24, by: 24) where rng.next() % 2 == 0 {
                bytes[at] = [0x80, 0x08][Int(rng.next() % 2)]
                bytes[at + 1] = [0x00, 0x01, 0x0c, 0x10][Int(rng.next() % 4)]
                bytes[at + 2] = 0
                bytes[at + 3] = UInt8(rng.next() % 4)
                bytes[at + 4] = 0
                (bytes[at + 8], bytes[at + 9], bytes[at + 10]) = (0, 0, 0)
                bytes[at + 11] = UInt8(rng.next() % 8)
            }
            let keys = Self.requestKeys(bytes)
            var buf = ByteBuffer(bytes: bytes)
            var decoded: [[UInt8]] = []
            while let frame = try? FrameDecoder.decode(&buf, maxBodyLength: 1 << 20) {
                if frame.magic == .clientRequest || frame.magic == .altClientRequest {
                    if frame.opcode.carriesDocumentKey { decoded.append(Array(frame.key.readableBytesView)) }
                } else {
                    break
                }
            }
            #expect(keys.map(\.1) == Array(decoded.prefix(keys.count)), "round \(round) seed 0x3a7e")
        }
    }
}
