select value from cairnq_meta where key = 'protocol_version'
