/// A response status. Values from kv_engine's `docs/BinaryProtocol.md`.
public struct Status: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public init(_ rawValue: UInt16) { self.rawValue = rawValue }

    public static let success = Status(0x00)
    public static let keyNotFound = Status(0x01)
    public static let keyExists = Status(0x02)
    public static let valueTooLarge = Status(0x03)
    public static let invalidArguments = Status(0x04)
    public static let notStored = Status(0x05)
    public static let deltaBadValue = Status(0x06)
    public static let notMyVBucket = Status(0x07)
    public static let noBucket = Status(0x08)
    public static let locked = Status(0x09)
    public static let authStale = Status(0x1f)
    public static let authError = Status(0x20)
    public static let authContinue = Status(0x21)
    public static let rangeError = Status(0x22)
    public static let accessDenied = Status(0x24)
    public static let notInitialized = Status(0x25)
    public static let unknownCommand = Status(0x81)
    public static let outOfMemory = Status(0x82)
    public static let notSupported = Status(0x83)
    public static let internalError = Status(0x84)
    public static let busy = Status(0x85)
    public static let temporaryFailure = Status(0x86)
    public static let unknownCollection = Status(0x88)
    public static let durabilityInvalidLevel = Status(0xa0)
    public static let durabilityImpossible = Status(0xa1)
    public static let syncWriteInProgress = Status(0xa2)
    public static let syncWriteAmbiguous = Status(0xa3)

    public var description: String { "0x" + String(rawValue, radix: 16) }
}
