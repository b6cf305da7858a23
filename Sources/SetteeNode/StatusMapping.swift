import SetteeProtocol
import SetteeStorage

extension EngineError {
    /// The wire status for an engine error.
    var status: Status {
        switch self {
        case .keyNotFound: return .keyNotFound
        case .keyExists: return .keyExists
        case .notStored: return .notStored
        case .deltaBadValue: return .deltaBadValue
        case .valueTooLarge: return .valueTooLarge
        case .temporaryFailure, .wouldBlock: return .temporaryFailure
        case .locked: return .locked
        case .invalidArguments: return .invalidArguments
        case .notMyVBucket: return .notMyVBucket
        case .ioFailure: return .internalError
        }
    }

    /// The short text memcached puts in an error response body.
    var message: [UInt8] {
        switch self {
        case .keyNotFound: return Array("Not found".utf8)
        case .keyExists: return Array("Data exists for key.".utf8)
        case .notStored: return Array("Not stored.".utf8)
        case .deltaBadValue: return Array("Non-numeric server-side value for incr or decr".utf8)
        case .valueTooLarge: return Array("Too large.".utf8)
        case .temporaryFailure, .wouldBlock: return Array("Temporary failure".utf8)
        case .locked: return Array("Locked".utf8)
        case .invalidArguments: return Array("Invalid arguments".utf8)
        case .notMyVBucket: return []
        case .ioFailure: return Array("Internal error".utf8)
        }
    }
}
