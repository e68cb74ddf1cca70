"""The tools that write rows: leave requests and IT tickets, stored for the caller."""

from __future__ import annotations

from typing import Any

from tools.arguments import ItTicketArgs, LeaveRequestArgs
from tools.context import ToolContext
from tools.tables import ItTicket, LeaveRequest


def submit_leave_request(args: LeaveRequestArgs, context: ToolContext) -> dict[str, Any]:
    session = context.require_session()
    request = LeaveRequest(
        user_id=context.require_user(),
        start_date=args.start_date,
        end_date=args.end_date,
        leave_type=args.leave_type,
        note=args.note,
        status="submitted",
    )
    session.add(request)
    session.flush()
    return {
        "request_id": request.id,
        "status": request.status,
        "start_date": args.start_date.isoformat(),
        "end_date": args.end_date.isoformat(),
        "days": (args.end_date - args.start_date).days + 1,
        "leave_type": args.leave_type,
    }


def create_it_ticket(args: ItTicketArgs, context: ToolContext) -> dict[str, Any]:
    session = context.require_session()
    ticket = ItTicket(
        user_id=context.require_user(),
        summary=args.summary,
        category=args.category,
        priority=args.priority,
        status="open",
    )
    session.add(ticket)
    session.flush()
    return {
        "ticket": ticket.number,
        "id": ticket.id,
        "status": ticket.status,
        "category": args.category,
        "priority": args.priority,
    }
