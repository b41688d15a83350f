package wire

// Decoding a publish (PUBLISH, or an entry of PUBLISH_BATCH) separates two kinds of fault.
// A frame that does not parse (a length past the body, a truncated field, trailing bytes, more
// headers than the body could hold) is malformed: the stream cannot be trusted after it. A
// well-formed publish over a per-publish limit is only refused: its fields are still walked
// (every length checked against the body before anything is taken), nothing over a limit is
// allocated, and Publish.Refused says which limit it broke, so the node answers that publish
// with PUBLISH_ERROR and reads on.

// publishTopic reads a publish's topic; one over MaxTopic is refused (code 4, as the topic
// grammar's faults are) and not converted.
func (d *dec) publishTopic() (string, *Error) {
	b := d.span("topic")
	if len(b) > d.lim.MaxTopic {
		return "", Errorf(CodeInvalidTopic, "topic of %d bytes is over the limit of %d bytes", len(b), d.lim.MaxTopic)
	}
	return d.intern(b, slotTopic), nil
}

// decodeEntry reads the fields after the topic: producer id, sequence, headers, payload.
// When the publish is refused (now, or already for its topic) it keeps only Seq and Topic.
func (p *Publish) decodeEntry(d *dec) {
	refuse := func(format string, args ...any) {
		if p.Refused == nil {
			p.Refused = Errorf(CodeTooLarge, format, args...)
		}
	}
	if b := d.span("producer id"); len(b) > d.lim.MaxString {
		refuse("producer id of %d bytes is over the limit of %d bytes", len(b), d.lim.MaxString)
	} else {
		p.ProducerID = d.intern(b, slotProducer)
	}
	p.Sequence = d.uvarint("sequence")
	p.Headers = d.publishHeaders(refuse)
	if b := d.span("payload"); len(b) > d.lim.MaxPayload {
		refuse("payload of %d bytes is over the limit of %d bytes", len(b), d.lim.MaxPayload)
	} else {
		p.Payload = b
	}
	if p.Refused != nil {
		*p = Publish{Seq: p.Seq, Topic: p.Topic, Refused: p.Refused}
	}
}

// publishHeaders reads a publish's headers. Past MaxHeaders, a key over MaxString, or keys
// and values over MaxHeaderBytes in all, it calls refuse and returns nil, having walked the
// rest without keeping it.
func (d *dec) publishHeaders(refuse func(format string, args ...any)) []Header {
	n := d.uvarint("header count")
	if d.err != nil || n == 0 {
		return nil
	}
	// Each header takes at least two bytes: a count the body cannot hold is malformed,
	// whatever the limit.
	if n > uint64(len(d.b))/2 {
		d.fail("header count %d exceeds what %d bytes can hold", n, len(d.b))
		return nil
	}
	keep := true
	if n > uint64(d.lim.MaxHeaders) {
		refuse("%d headers are over the limit of %d", n, d.lim.MaxHeaders)
		keep = false
	}
	var hs []Header
	if keep {
		hs = make([]Header, 0, n)
	}
	total := 0
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.span("header key")
		v := d.span("header value")
		total += len(k) + len(v)
		if len(k) > d.lim.MaxString {
			refuse("header key of %d bytes is over the limit of %d bytes", len(k), d.lim.MaxString)
			keep = false
		}
		if total > d.lim.MaxHeaderBytes {
			keep = false // refused below, with the whole size
		}
		if keep {
			hs = append(hs, Header{Key: string(k), Value: v})
		}
	}
	if total > d.lim.MaxHeaderBytes {
		refuse("headers of %d bytes (keys and values) are over the limit of %d bytes", total, d.lim.MaxHeaderBytes)
		keep = false
	}
	if !keep || d.err != nil {
		return nil
	}
	return hs
}
