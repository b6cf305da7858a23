import NIOCore
import SetteeProtocol
import Testing

/// OBSERVE (0x92)'s request and reply values, without a server: the key list a client sends, what is refused, and
/// the reply's layout byte by byte.
@Suite struct ObserveTests {
    func parse(_ bytes: [UInt8], maxKeys: Int = 16, maxKeyLength: Int = 250) throws(Observe.ParseError) -> [Observe.Key]
    {
        try Observe.parse(ByteBuffer(bytes: bytes), maxKeys: maxKeys, maxKeyLength: maxKeyLength)
    }

    @Test func aKeyListRoundTrips() throws {
        let keys = [
            Observe.Key(vbucket: 7, key: Array("a".utf8)),
            Observe.Key(vbucket: 1023, key: Array("user::1234".utf8)),
            Observe.Key(vbucket: 7, key: [UInt8](repeating: 0x7a, count: 250)),
        ]
        let value = Observe.requestValue(keys)
        #expect(Array(value.prefix(5)) == [0x00, 0x07, 0x00, 0x01, 0x61])
        #expect(try parse(value) == keys)
    }

    /// Cut anywhere inside an entry, an empty key, a key past the length limit, an empty list: malformed. One key
    /// over the count limit: too many.
    @Test func malformedListsAreRefused() throws {
        let value = Observe.requestValue([
            Observe.Key(vbucket: 1, key: Array("abc".utf8)), Observe.Key(vbucket: 2, key: Array("de".utf8)),
        ])
        for cut in 1..<value.count where cut != 7 {
            #expect(throws: Observe.ParseError.malformed) { try parse(Array(value.prefix(cut))) }
        }
        #expect(try parse(Array(value.prefix(7))).count == 1)
        #expect(throws: Observe.ParseError.malformed) { try parse([]) }
        #expect(throws: Observe.ParseError.malformed) { try parse([0, 1, 0, 0]) }
        #expect(throws: Observe.ParseError.malformed) { try parse([0, 1, 0, 4, 1, 2, 3, 4], maxKeyLength: 3) }
        #expect(try parse([0, 1, 0, 3, 1, 2, 3], maxKeyLength: 3).count == 1)
        // A length field of 0xffff with nothing after it.
        #expect(throws: Observe.ParseError.malformed) { try parse([0, 1, 0xff, 0xff]) }
        let three = Observe.requestValue((0..<3).map { Observe.Key(vbucket: 0, key: [UInt8($0) + 0x61]) })
        #expect(throws: Observe.ParseError.tooManyKeys) { try parse(three, maxKeys: 2) }
        #expect(try parse(three, maxKeys: 3).count == 3)
    }

    /// The reply: vbucket, key length, key, state, CAS (big-endian), for each key in order; decoding reads it back
    /// and refuses an unknown state or a cut entry.
    @Test func theReplyLayout() throws {
        let answers = [
            Observe.Answer(vbucket: 3, key: Array("k".utf8), state: .persisted, cas: 0x0102_0304_0506_0708),
            Observe.Answer(vbucket: 4, key: Array("gone".utf8), state: .logicallyDeleted, cas: 9),
            Observe.Answer(vbucket: 5, key: Array("none".utf8), state: .notFound, cas: 0),
        ]
        var b = ByteBuffer()
        Observe.write(answers, into: &b)
        #expect(b.readableBytes == Observe.encodedLength(answers))
        #expect(
            Array(b.readableBytesView.prefix(14))
                == [0x00, 0x03, 0x00, 0x01, 0x6b, 0x01, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08])
        #expect(Observe.answers(decoding: b) == answers)
        var unknown = b
        unknown.setInteger(UInt8(0x42), at: 5)
        #expect(Observe.answers(decoding: unknown) == nil)
        #expect(Observe.answers(decoding: b.getSlice(at: 0, length: b.readableBytes - 1)!) == nil)
        #expect(Observe.KeyState.notPersisted.rawValue == 0x00 && Observe.KeyState.notFound.rawValue == 0x80)
    }
}
